//! Where a replica learns its place in the world (rank, world size, rendezvous address) from the
//! variables its launcher set. The contract is documented in `docs/environment.md`.
//!
//! Layout:
//! - [`LauncherKind`], [`DistEnv`]: the result, with [`DistEnv::describe`] for logs.
//! - [`DistEnv::from_env`] / [`DistEnv::from_vars`]: detection in the order torchrun > Slurm >
//!   Open MPI > single process, then validation ([`Error::Env`] names the variable and its value).
//! - [`expand_slurm_nodelist`]: Slurm's compressed host lists (`node[01-04,07]`).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Rendezvous host when a single node runs the whole world and nothing else was set.
pub const DEFAULT_MASTER_ADDR: &str = "127.0.0.1";
/// Rendezvous port when `MASTER_PORT` is not set (torchrun's default).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// The variables that put a process into a launcher's world: the ones [`DistEnv::from_env`]
/// detects torchrun, Slurm and Open MPI by, the placement read with them, the group's token and
/// torchelastic's restart count. A process that starts a trainer outside its own launcher's
/// world (a benchmark, a test) removes them from the child's environment, so that the child
/// sees no launcher at all.
pub const LAUNCHER_VARIABLES: [&str; 16] = [
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
];

/// Most hosts [`expand_slurm_nodelist`] produces; a larger list is certainly a typo.
const MAX_HOSTS: usize = 1 << 20;

const HINT_TORCHRUN: &str = "torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, \
                             MASTER_ADDR and MASTER_PORT; set both RANK and WORLD_SIZE, or neither \
                             to run a single process";
const HINT_SLURM: &str = "srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and \
                          SLURM_TASKS_PER_NODE; start the replicas with srun \
                          (srun ddp-trainer SPEC --out DIR)";
const HINT_MPI: &str = "mpirun sets OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, \
                        OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE";

/// Which launcher started this replica, as detected from its variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherKind {
    /// No launcher variables: a world of one.
    Single,
    /// `RANK` and `WORLD_SIZE` (torchrun, `ddp-trainer --standalone`, Kubernetes PyTorchJob).
    Torchrun,
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
    /// unset.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<DistEnv> {
        let vars = Vars(get);
        if vars.has("RANK") || vars.has("WORLD_SIZE") {
            torchrun(&vars)
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
    // Kubernetes' PyTorchJob sets neither local variable: one replica per pod.
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
    let Some(value) = vars.get("MASTER_PORT") else {
        return Ok(DEFAULT_MASTER_PORT);
    };
    match value.parse::<u64>() {
        Ok(port @ 1..=65535) => Ok(port as u16),
        Ok(_) => Err(env_err(
            "MASTER_PORT",
            format!("{value} is out of range; set it to a TCP port in 1..=65535"),
        )),
        Err(_) => Err(env_err(
            "MASTER_PORT",
            format!("{value:?} is not a port number; set it to a TCP port in 1..=65535"),
        )),
    }
}

fn env_err(var: &str, msg: impl Into<String>) -> Error {
    Error::Env {
        var: var.to_string(),
        msg: msg.into(),
    }
}

/// `var` is missing although `because` is set.
fn missing(var: &str, because: &str, hint: &str) -> Error {
    env_err(var, format!("is not set but {because} is; {hint}"))
}

/// The variable lookup, trimmed, with empty values treated as unset.
struct Vars<F>(F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    fn get(&self, var: &str) -> Option<String> {
        let value = (self.0)(var)?;
        let value = value.trim();
        (!value.is_empty()).then(|| value.to_string())
    }

    fn has(&self, var: &str) -> bool {
        self.get(var).is_some()
    }

    /// The variable as a non-negative integer, `None` when unset.
    fn int<T: FromStr>(&self, var: &str) -> Result<Option<T>> {
        let Some(value) = self.get(var) else {
            return Ok(None);
        };
        match value.parse::<T>() {
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(env_err(
                var,
                format!("{value:?} is not a non-negative integer; set {var} to a number like 0"),
            )),
        }
    }

    /// Like [`Vars::int`], but an unset variable is an error with `hint`.
    fn required<T: FromStr>(&self, var: &str, hint: &str) -> Result<T> {
        self.int(var)?
            .ok_or_else(|| env_err(var, format!("is not set; {hint}")))
    }
}

/// Expands a Slurm host list (`SLURM_JOB_NODELIST`) in Slurm's order: `node[01-04,07]`,
/// `a1,b[2-3]`, `gpu-[1-2]-x`, several bracket groups (`r[1-2]n[1-2]` = r1n1, r1n2, r2n1, r2n2);
/// a range keeps its first number's zero padding (`[08-10]` = 08, 09, 10).
pub fn expand_slurm_nodelist(s: &str) -> Result<Vec<String>> {
    expand_nodelist(s).map_err(|msg| env_err("SLURM_JOB_NODELIST", msg))
}

fn expand_nodelist(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_outside_brackets(s)? {
        let item = item.trim();
        if !item.is_empty() {
            hosts.extend(expand_host(item).map_err(|msg| format!("{s:?}: {msg}"))?);
        }
        if hosts.len() > MAX_HOSTS {
            return Err(format!("{s:?} expands to more than {MAX_HOSTS} hosts"));
        }
    }
    if hosts.is_empty() {
        return Err(format!("{s:?} names no hosts"));
    }
    Ok(hosts)
}

/// Splits at the commas outside `[...]`, checking that brackets pair up and do not nest.
fn split_outside_brackets(s: &str) -> std::result::Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut start, mut open) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            '[' if open => return Err(format!("{s:?} has a nested '[' at byte {i}")),
            '[' => open = true,
            ']' if !open => return Err(format!("{s:?} has an unmatched ']' at byte {i}")),
            ']' => open = false,
            ',' if !open => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if open {
        return Err(format!("{s:?} has an unclosed '['"));
    }
    items.push(&s[start..]);
    Ok(items)
}

/// One host pattern with balanced brackets: the product of its bracket groups, left to right.
fn expand_host(pattern: &str) -> std::result::Result<Vec<String>, String> {
    let mut hosts = vec![String::new()];
    let mut rest = pattern;
    while let Some(open) = rest.find('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| format!("unclosed '[' in {pattern:?}"))?;
        let (prefix, body) = (&rest[..open], &rest[open + 1..close]);
        let numbers =
            expand_ranges(body).map_err(|msg| format!("[{body}] in {pattern:?}: {msg}"))?;
        if hosts.len().saturating_mul(numbers.len()) > MAX_HOSTS {
            return Err(format!(
                "{pattern:?} expands to more than {MAX_HOSTS} hosts"
            ));
        }
        hosts = hosts
            .iter()
            .flat_map(|host| numbers.iter().map(move |n| format!("{host}{prefix}{n}")))
            .collect();
        rest = &rest[close + 1..];
    }
    for host in &mut hosts {
        host.push_str(rest);
    }
    Ok(hosts)
}

/// `01-03,7` → `01 02 03 7`.
fn expand_ranges(body: &str) -> std::result::Result<Vec<String>, String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut numbers = Vec::new();
    for part in body.split(',').map(str::trim) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if !digits(lo) || !digits(hi) {
            return Err(format!("{part:?} is not a number or a range like 01-04"));
        }
        let too_long = || format!("{part:?} is too large");
        let (lo_n, hi_n) = (
            lo.parse::<u64>().map_err(|_| too_long())?,
            hi.parse::<u64>().map_err(|_| too_long())?,
        );
        if hi_n < lo_n {
            return Err(format!("the range {part:?} runs backwards"));
        }
        if hi_n - lo_n >= MAX_HOSTS as u64 {
            return Err(format!(
                "the range {part:?} has more than {MAX_HOSTS} hosts"
            ));
        }
        let width = lo.len();
        numbers.extend((lo_n..=hi_n).map(|n| format!("{n:0width$}")));
    }
    Ok(numbers)
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
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<DistEnv> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        DistEnv::from_vars(|k| map.get(k).cloned())
    }

    /// The error's variable and message, or a panic naming what came back instead.
    fn env_error(pairs: &[(&str, &str)]) -> (String, String) {
        match from(pairs) {
            Err(Error::Env { var, msg }) => (var, msg),
            other => panic!("expected Error::Env for {pairs:?}, got {other:?}"),
        }
    }

    fn hosts(s: &str) -> Vec<String> {
        expand_slurm_nodelist(s).unwrap()
    }

    const TORCHRUN: &[(&str, &str)] = &[
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RESTART_COUNT", "3"),
    ];

    fn with(
        base: &[(&'static str, &'static str)],
        changes: &[(&'static str, &'static str)],
    ) -> Vec<(&'static str, &'static str)> {
        let mut pairs: Vec<_> = base
            .iter()
            .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
            .copied()
            .collect();
        pairs.extend(changes.iter().filter(|(_, v)| !v.is_empty()).copied());
        pairs
    }

    #[test]
    fn nothing_set_is_a_world_of_one() {
        let env = from(&[("PATH", "/bin")]).unwrap();
        assert_eq!(env, DistEnv::single());
        assert_eq!(
            (
                env.rank,
                env.world_size,
                env.master_addr.as_str(),
                env.master_port
            ),
            (0, 1, "127.0.0.1", 29500)
        );
        assert_eq!(env.describe(), "rank 0/1 (single process, no launcher)");
    }

    #[test]
    fn torchrun_reads_every_variable() {
        let env = from(TORCHRUN).unwrap();
        assert_eq!(
            env,
            DistEnv {
                rank: 1,
                world_size: 4,
                local_rank: 1,
                local_world_size: 2,
                master_addr: "10.0.0.1".into(),
                master_port: 29500,
                restart_count: 3,
                kind: LauncherKind::Torchrun,
            }
        );
        assert_eq!(
            env.describe(),
            "rank 1/4 (local 1/2) via torchrun, master 10.0.0.1:29500, restart 3"
        );
    }

    #[test]
    fn describe_brackets_ipv6_and_omits_restart_zero() {
        let env = from(&with(
            TORCHRUN,
            &[
                ("MASTER_ADDR", "fd00::1"),
                ("TORCHELASTIC_RESTART_COUNT", ""),
            ],
        ))
        .unwrap();
        assert_eq!(
            env.describe(),
            "rank 1/4 (local 1/2) via torchrun, master [fd00::1]:29500"
        );
    }

    #[test]
    fn torchrun_single_node_defaults_master() {
        let env = from(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "3"),
            ("LOCAL_RANK", "2"),
            ("LOCAL_WORLD_SIZE", "3"),
        ])
        .unwrap();
        assert_eq!(
            (env.master_addr.as_str(), env.master_port),
            ("127.0.0.1", 29500)
        );
        assert_eq!(env.restart_count, 0);
    }

    #[test]
    fn torchrun_multi_node_without_master_addr_is_an_error() {
        let (var, msg) = env_error(&with(TORCHRUN, &[("MASTER_ADDR", "")]));
        assert_eq!(var, "MASTER_ADDR");
        assert!(
            msg.contains("several nodes (WORLD_SIZE = 4, LOCAL_WORLD_SIZE = 2)"),
            "{msg}"
        );
        assert!(
            msg.contains("set MASTER_ADDR to the host of rank 0"),
            "{msg}"
        );
    }

    #[test]
    fn torchrun_without_master_port_uses_default() {
        let env = from(&with(TORCHRUN, &[("MASTER_PORT", "")])).unwrap();
        assert_eq!(env.master_port, 29500);
    }

    #[test]
    fn kubernetes_pytorchjob_without_local_variables() {
        let env = from(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "job-master-0"),
            ("MASTER_PORT", "23456"),
        ])
        .unwrap();
        assert_eq!((env.local_rank, env.local_world_size), (0, 1));
        assert_eq!(
            (env.master_addr.as_str(), env.master_port),
            ("job-master-0", 23456)
        );
        assert_eq!(env.kind, LauncherKind::Torchrun);
    }

    #[test]
    fn values_are_trimmed_and_empty_means_unset() {
        let env = from(&[
            (" RANK", "x"),
            ("RANK", " 0 "),
            ("WORLD_SIZE", "1\n"),
            ("LOCAL_RANK", ""),
        ])
        .unwrap();
        assert_eq!(
            (
                env.rank,
                env.world_size,
                env.local_rank,
                env.local_world_size
            ),
            (0, 1, 0, 1)
        );
        assert_eq!(from(&[("RANK", "  ")]).unwrap(), DistEnv::single());
    }

    #[test]
    fn torchrun_half_set_is_an_error() {
        let (var, msg) = env_error(&[("RANK", "0")]);
        assert_eq!(var, "WORLD_SIZE");
        assert!(
            msg.starts_with("is not set; torchrun sets RANK, WORLD_SIZE"),
            "{msg}"
        );
        let (var, _) = env_error(&[("WORLD_SIZE", "2")]);
        assert_eq!(var, "RANK");
        let (var, msg) = env_error(&with(TORCHRUN, &[("LOCAL_WORLD_SIZE", "")]));
        assert_eq!(var, "LOCAL_WORLD_SIZE");
        assert!(msg.starts_with("is not set but LOCAL_RANK is"), "{msg}");
        let (var, _) = env_error(&with(TORCHRUN, &[("LOCAL_RANK", "")]));
        assert_eq!(var, "LOCAL_RANK");
    }

    #[test]
    fn unparsable_integers_name_the_variable_and_value() {
        for var in [
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "TORCHELASTIC_RESTART_COUNT",
        ] {
            let (got, msg) = env_error(&with(TORCHRUN, &[(var, "-1")]));
            assert_eq!(got, var);
            assert_eq!(
                msg,
                format!("\"-1\" is not a non-negative integer; set {var} to a number like 0")
            );
        }
        let err = from(&with(TORCHRUN, &[("RANK", "one")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable RANK: \"one\" is not a non-negative integer; \
             set RANK to a number like 0"
        );
        assert_eq!(err.exit_code(), crate::error::EXIT_CONFIG);
    }

    #[test]
    fn rank_bounds_are_checked() {
        let (var, msg) = env_error(&with(TORCHRUN, &[("WORLD_SIZE", "0")]));
        assert_eq!(
            (var.as_str(), msg.as_str()),
            ("WORLD_SIZE", "is 0; a world needs at least one replica")
        );
        let (var, msg) = env_error(&with(TORCHRUN, &[("RANK", "4")]));
        assert_eq!(
            (var.as_str(), msg.as_str()),
            ("RANK", "is 4 but WORLD_SIZE is 4; ranks run from 0 to 3")
        );
        let (var, msg) = env_error(&with(TORCHRUN, &[("LOCAL_RANK", "2")]));
        assert_eq!(
            (var.as_str(), msg.as_str()),
            (
                "LOCAL_RANK",
                "is 2 but LOCAL_WORLD_SIZE is 2; local ranks run from 0 to 1"
            )
        );
        let (var, msg) = env_error(&with(TORCHRUN, &[("LOCAL_WORLD_SIZE", "0")]));
        assert_eq!(
            (var.as_str(), msg.as_str()),
            (
                "LOCAL_WORLD_SIZE",
                "is 0; a node needs at least one replica"
            )
        );
        let (var, msg) = env_error(&with(TORCHRUN, &[("LOCAL_WORLD_SIZE", "5")]));
        assert_eq!(var, "LOCAL_WORLD_SIZE");
        assert!(msg.starts_with("is 5 but WORLD_SIZE is 4"), "{msg}");
    }

    #[test]
    fn master_port_is_checked() {
        for (value, msg) in [
            ("0", "0 is out of range; set it to a TCP port in 1..=65535"),
            (
                "65536",
                "65536 is out of range; set it to a TCP port in 1..=65535",
            ),
            (
                "http",
                "\"http\" is not a port number; set it to a TCP port in 1..=65535",
            ),
        ] {
            let (var, got) = env_error(&with(TORCHRUN, &[("MASTER_PORT", value)]));
            assert_eq!((var.as_str(), got.as_str()), ("MASTER_PORT", msg));
        }
        assert_eq!(
            from(&with(TORCHRUN, &[("MASTER_PORT", "65535")]))
                .unwrap()
                .master_port,
            65535
        );
        assert_eq!(
            from(&with(TORCHRUN, &[("MASTER_PORT", "1")]))
                .unwrap()
                .master_port,
            1
        );
    }

    const SLURM: &[(&str, &str)] = &[
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ("SLURM_JOB_NODELIST", "gpu[07-08]"),
        ("SLURM_NODELIST", "other1"),
        ("SLURM_RESTART_COUNT", "2"),
    ];

    #[test]
    fn slurm_reads_every_variable() {
        let env = from(SLURM).unwrap();
        assert_eq!(
            env,
            DistEnv {
                rank: 5,
                world_size: 8,
                local_rank: 1,
                local_world_size: 4,
                master_addr: "gpu07".into(),
                master_port: 29500,
                restart_count: 2,
                kind: LauncherKind::Slurm,
            }
        );
        assert_eq!(
            env.describe(),
            "rank 5/8 (local 1/4) via slurm, master gpu07:29500, restart 2"
        );
    }

    #[test]
    fn slurm_master_and_local_world_sources() {
        let env = from(&with(
            SLURM,
            &[("MASTER_ADDR", "10.1.1.1"), ("MASTER_PORT", "1234")],
        ))
        .unwrap();
        assert_eq!(
            (env.master_addr.as_str(), env.master_port),
            ("10.1.1.1", 1234)
        );
        let env = from(&with(SLURM, &[("SLURM_JOB_NODELIST", "")])).unwrap();
        assert_eq!(env.master_addr, "other1");
        let env = from(&with(
            SLURM,
            &[
                ("SLURM_NTASKS_PER_NODE", "2"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_PROCID", "3"),
            ],
        ))
        .unwrap();
        assert_eq!(
            env.local_world_size, 2,
            "SLURM_NTASKS_PER_NODE wins over SLURM_TASKS_PER_NODE"
        );
        let env = from(&with(
            SLURM,
            &[("SLURM_TASKS_PER_NODE", "3(x2),2"), ("SLURM_NODEID", "2")],
        ))
        .unwrap();
        assert_eq!(env.local_world_size, 2);
        let env = from(&with(SLURM, &[("SLURM_NTASKS", ""), ("SLURM_NPROCS", "8")])).unwrap();
        assert_eq!(env.world_size, 8);
    }

    #[test]
    fn slurm_errors() {
        let (var, msg) = env_error(&with(
            SLURM,
            &[("SLURM_JOB_NODELIST", ""), ("SLURM_NODELIST", "")],
        ));
        assert_eq!(var, "MASTER_ADDR");
        assert!(msg.contains("SLURM_JOB_NODELIST"), "{msg}");
        let (var, msg) = env_error(&with(SLURM, &[("SLURM_JOB_NODELIST", "gpu[07-")]));
        assert_eq!(var, "SLURM_JOB_NODELIST");
        assert!(
            msg.contains("unclosed '['")
                && msg.ends_with("or set MASTER_ADDR to the host of rank 0"),
            "{msg}"
        );
        let (var, msg) = env_error(&with(SLURM, &[("SLURM_TASKS_PER_NODE", "")]));
        assert_eq!(var, "SLURM_TASKS_PER_NODE");
        assert!(msg.contains("SLURM_NTASKS_PER_NODE"), "{msg}");
        let (var, msg) = env_error(&with(SLURM, &[("SLURM_TASKS_PER_NODE", "4(x)")]));
        assert_eq!(var, "SLURM_TASKS_PER_NODE");
        assert!(
            msg.starts_with("\"4(x)\" has an unreadable entry \"4(x)\""),
            "{msg}"
        );
        let (var, _) = env_error(&with(SLURM, &[("SLURM_TASKS_PER_NODE", "3(x2),2")]));
        assert_eq!(var, "SLURM_NODEID");
        let (var, msg) = env_error(&with(
            SLURM,
            &[("SLURM_TASKS_PER_NODE", "3(x2),2"), ("SLURM_NODEID", "3")],
        ));
        assert_eq!(
            (var.as_str(), msg.as_str()),
            (
                "SLURM_NODEID",
                "is 3 but SLURM_TASKS_PER_NODE = \"3(x2),2\" lists 3 nodes"
            )
        );
        let (var, _) = env_error(&with(SLURM, &[("SLURM_NTASKS", "")]));
        assert_eq!(var, "SLURM_NTASKS");
        let (var, _) = env_error(&with(SLURM, &[("SLURM_LOCALID", "")]));
        assert_eq!(var, "SLURM_LOCALID");
        let (var, msg) = env_error(&with(SLURM, &[("SLURM_PROCID", "8")]));
        assert_eq!(
            (var.as_str(), msg.as_str()),
            (
                "SLURM_PROCID",
                "is 8 but SLURM_NTASKS is 8; ranks run from 0 to 7"
            )
        );
        let (var, msg) = env_error(&with(SLURM, &[("SLURM_LOCALID", "4")]));
        assert_eq!(
            (var.as_str(), msg.as_str()),
            (
                "SLURM_LOCALID",
                "is 4 but SLURM_TASKS_PER_NODE is 4; local ranks run from 0 to 3"
            )
        );
        let (var, _) = env_error(&with(SLURM, &[("SLURM_RESTART_COUNT", "x")]));
        assert_eq!(var, "SLURM_RESTART_COUNT");
        let (var, _) = env_error(&with(SLURM, &[("MASTER_PORT", "99999")]));
        assert_eq!(var, "MASTER_PORT");
    }

    const MPI: &[(&str, &str)] = &[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ("MASTER_ADDR", "head"),
    ];

    #[test]
    fn open_mpi_reads_every_variable() {
        let env = from(MPI).unwrap();
        assert_eq!(
            env,
            DistEnv {
                rank: 2,
                world_size: 4,
                local_rank: 0,
                local_world_size: 2,
                master_addr: "head".into(),
                master_port: 29500,
                restart_count: 0,
                kind: LauncherKind::OpenMpi,
            }
        );
        assert_eq!(
            env.describe(),
            "rank 2/4 (local 0/2) via open mpi, master head:29500"
        );
        let env = from(&with(
            MPI,
            &[("MASTER_ADDR", ""), ("OMPI_COMM_WORLD_LOCAL_SIZE", "4")],
        ))
        .unwrap();
        assert_eq!(
            (env.master_addr.as_str(), env.master_port),
            ("127.0.0.1", 29500)
        );
    }

    #[test]
    fn open_mpi_errors() {
        let (var, msg) = env_error(&with(MPI, &[("MASTER_ADDR", "")]));
        assert_eq!(var, "MASTER_ADDR");
        assert!(
            msg.contains("OMPI_COMM_WORLD_SIZE = 4, OMPI_COMM_WORLD_LOCAL_SIZE = 2"),
            "{msg}"
        );
        for var in [
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ] {
            let (got, msg) = env_error(&with(MPI, &[(var, "")]));
            assert_eq!(got, var);
            assert!(msg.starts_with("is not set; mpirun sets"), "{msg}");
        }
        let (var, _) = env_error(&with(MPI, &[("OMPI_COMM_WORLD_RANK", "4")]));
        assert_eq!(var, "OMPI_COMM_WORLD_RANK");
        let (var, _) = env_error(&with(MPI, &[("OMPI_COMM_WORLD_LOCAL_RANK", "2")]));
        assert_eq!(var, "OMPI_COMM_WORLD_LOCAL_RANK");
    }

    #[test]
    fn precedence_torchrun_then_slurm_then_mpi() {
        let all: Vec<_> = TORCHRUN.iter().chain(SLURM).chain(MPI).copied().collect();
        assert_eq!(from(&all).unwrap().kind, LauncherKind::Torchrun);
        let slurm_mpi: Vec<_> = SLURM.iter().chain(MPI).copied().collect();
        let env = from(&slurm_mpi).unwrap();
        assert_eq!(env.kind, LauncherKind::Slurm);
        assert_eq!(
            env.master_addr, "head",
            "MASTER_ADDR wins over the node list"
        );
        assert_eq!(from(MPI).unwrap().kind, LauncherKind::OpenMpi);
    }

    #[test]
    fn nodelist_expansion() {
        assert_eq!(
            hosts("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(hosts("a1,b[2-3]"), ["a1", "b2", "b3"]);
        assert_eq!(hosts("gpu-[1-2]-x"), ["gpu-1-x", "gpu-2-x"]);
        assert_eq!(hosts("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(hosts("n[001-002]"), ["n001", "n002"]);
        assert_eq!(
            hosts("r[1-2]n[01-02]"),
            ["r1n01", "r1n02", "r2n01", "r2n02"]
        );
        assert_eq!(
            hosts("r[1-2]-n[3,5]-[7]"),
            ["r1-n3-7", "r1-n5-7", "r2-n3-7", "r2-n5-7"]
        );
        assert_eq!(hosts("single"), ["single"]);
        assert_eq!(hosts(" a , c[1-2],b "), ["a", "c1", "c2", "b"]);
        assert_eq!(hosts("x[5]"), ["x5"]);
        assert_eq!(
            hosts("x.example.com,y[1-2].example.com"),
            ["x.example.com", "y1.example.com", "y2.example.com"]
        );
    }

    #[test]
    fn nodelist_errors() {
        for (list, needle) in [
            ("", "names no hosts"),
            (" , ", "names no hosts"),
            ("n[1-", "unclosed '['"),
            ("n1]", "unmatched ']'"),
            ("n[[1]]", "nested '['"),
            ("n[]", "\"\" is not a number or a range"),
            ("n[a-b]", "\"a-b\" is not a number or a range"),
            ("n[1-2-3]", "\"1-2-3\" is not a number or a range"),
            ("n[3-1]", "the range \"3-1\" runs backwards"),
            ("n[0-99999999]", "has more than"),
            ("n[0-999]m[0-9999]", "expands to more than"),
            ("n[99999999999999999999]", "is too large"),
        ] {
            match expand_slurm_nodelist(list) {
                Err(Error::Env { var, msg }) => {
                    assert_eq!(var, "SLURM_JOB_NODELIST");
                    assert!(msg.contains(needle), "{list:?}: {msg}");
                }
                other => panic!("{list:?}: expected an error, got {other:?}"),
            }
        }
    }

    #[test]
    fn tasks_per_node_parsing() {
        assert_eq!(parse_tasks_per_node("4").unwrap(), [4]);
        assert_eq!(parse_tasks_per_node("4(x2)").unwrap(), [4, 4]);
        assert_eq!(parse_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert!(parse_tasks_per_node("x").is_err());
        assert!(parse_tasks_per_node("4(x2").is_err());
        assert!(parse_tasks_per_node("1(x99999999)").is_err());
    }
}
