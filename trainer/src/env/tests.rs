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
fn the_ddp_supervisor_names_itself() {
    let env = from(&with(TORCHRUN, &[("DDP_LAUNCHER", "ddp")])).unwrap();
    assert_eq!(env.kind, LauncherKind::Ddp);
    assert_eq!(
        env.describe(),
        "rank 1/4 (local 1/2) via ddp, master 10.0.0.1:29500, restart 3"
    );
    // Only with torchrun's variables, and only the value `ddp`.
    let env = from(&with(TORCHRUN, &[("DDP_LAUNCHER", "other")])).unwrap();
    assert_eq!(env.kind, LauncherKind::Torchrun);
    assert_eq!(
        from(&[("DDP_LAUNCHER", "ddp")]).unwrap().kind,
        LauncherKind::Single
    );
    let slurm = from(&with(SLURM, &[("DDP_LAUNCHER", "ddp")])).unwrap();
    assert_eq!(slurm.kind, LauncherKind::Slurm);
    assert!(LAUNCHER_VARIABLES.contains(&"DDP_LAUNCHER"));
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
        msg.contains("unclosed '['") && msg.ends_with("or set MASTER_ADDR to the host of rank 0"),
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
fn tasks_per_node_parsing() {
    assert_eq!(parse_tasks_per_node("4").unwrap(), [4]);
    assert_eq!(parse_tasks_per_node("4(x2)").unwrap(), [4, 4]);
    assert_eq!(parse_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
    assert!(parse_tasks_per_node("x").is_err());
    assert!(parse_tasks_per_node("4(x2").is_err());
    assert!(parse_tasks_per_node("1(x99999999)").is_err());
}

fn placement(pairs: &[(&str, &str)]) -> Result<Role> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Role::from_vars(|k| map.get(k).cloned())
}

fn node(pairs: &[(&str, &str)]) -> NodeWorld {
    match placement(pairs) {
        Ok(Role::Node(n)) => n,
        other => panic!("expected a Kubeflow node for {pairs:?}, got {other:?}"),
    }
}

fn node_error(pairs: &[(&str, &str)]) -> (String, String) {
    match placement(pairs) {
        Err(Error::Env { var, msg }) => (var, msg),
        other => panic!("expected Error::Env for {pairs:?}, got {other:?}"),
    }
}

/// Pod 1 of a PyTorchJob with 2 nodes × 2 replicas (training operator v1.9): RANK is the pod's
/// index and WORLD_SIZE pods × nprocPerNode.
const PYTORCHJOB: &[(&str, &str)] = &[
    ("PET_NNODES", "2"),
    ("PET_NODE_RANK", "1"),
    ("PET_NPROC_PER_NODE", "2"),
    ("PET_MASTER_ADDR", "job-master-0"),
    ("PET_MASTER_PORT", "23456"),
    ("MASTER_ADDR", "job-master-0"),
    ("MASTER_PORT", "23456"),
    ("RANK", "1"),
    ("WORLD_SIZE", "4"),
    ("PYTHONUNBUFFERED", "1"),
];

/// Node 1 of a TrainJob on the torch runtime (Kubeflow Trainer v2): no RANK nor WORLD_SIZE.
const TRAINJOB: &[(&str, &str)] = &[
    ("PET_NNODES", "2"),
    ("PET_NODE_RANK", "1"),
    ("PET_NPROC_PER_NODE", "2"),
    ("PET_MASTER_ADDR", "job-node-0-0.job"),
    ("PET_MASTER_PORT", "29500"),
];

#[test]
fn a_kubeflow_pod_is_a_node_that_launches_its_replicas() {
    for (vars, addr, port) in [
        (PYTORCHJOB, "job-master-0", 23456),
        (TRAINJOB, "job-node-0-0.job", 29500),
    ] {
        let n = node(vars);
        assert_eq!(
            n,
            NodeWorld {
                nnodes: 2,
                node_rank: 1,
                nproc_per_node: 2,
                master_addr: addr.into(),
                master_port: port,
                min_nodes: None,
                via: "kubeflow".into(),
            }
        );
        assert_eq!((n.world_size(), n.first_rank()), (4, 2));
    }
    assert_eq!(
        node(PYTORCHJOB).describe(),
        "node 1/2 via kubeflow: ranks 2-3 of 4, master job-master-0:23456"
    );
    // An elasticPolicy's range: the job's pods are its maximum.
    let n = node(&with(PYTORCHJOB, &[("PET_NNODES", "1:2")]));
    assert_eq!((n.nnodes, n.min_nodes, n.world_size()), (2, Some(1), 4));
    // Older operators set WORLD_SIZE to the number of pods.
    assert_eq!(
        node(&with(PYTORCHJOB, &[("WORLD_SIZE", "2")])).world_size(),
        4
    );
    // RANK alone gives the node rank; MASTER_ADDR/PORT stand in for the PET_ ones.
    let n = node(&with(
        PYTORCHJOB,
        &[
            ("PET_NODE_RANK", ""),
            ("PET_MASTER_ADDR", ""),
            ("PET_MASTER_PORT", ""),
        ],
    ));
    assert_eq!(
        (n.node_rank, n.master_addr.as_str(), n.master_port),
        (1, "job-master-0", 23456)
    );
    // A job of one node needs no rendezvous host.
    let n = node(&[
        ("PET_NNODES", "1"),
        ("PET_NODE_RANK", "0"),
        ("PET_NPROC_PER_NODE", "3"),
    ]);
    assert_eq!(
        (n.master_addr.as_str(), n.master_port),
        ("127.0.0.1", 29500)
    );
    assert_eq!(
        n.describe(),
        "node 0/1 via kubeflow: ranks 0-2 of 3, master 127.0.0.1:29500"
    );
}

#[test]
fn a_pytorchjob_without_nproc_per_node_runs_one_replica_per_pod() {
    // nprocPerNode defaults to `auto`, and WORLD_SIZE is then the number of pods.
    let auto = with(
        PYTORCHJOB,
        &[("PET_NPROC_PER_NODE", "auto"), ("WORLD_SIZE", "2")],
    );
    let n = node(&auto);
    assert_eq!(
        (n.nproc_per_node, n.world_size(), n.first_rank()),
        (1, 2, 1)
    );
    assert_eq!(
        n.describe(),
        "node 1/2 via kubeflow: rank 1 of 2, master job-master-0:23456"
    );
}

#[test]
fn a_replica_started_inside_the_pod_is_not_a_node() {
    // The node's own launcher (or torchrun) sets LOCAL_RANK: the PET_ variables it inherited
    // are ignored and RANK is the replica's.
    let replica = with(
        PYTORCHJOB,
        &[
            ("RANK", "3"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
        ],
    );
    match placement(&replica).unwrap() {
        Role::Replica(env) => {
            assert_eq!((env.rank, env.world_size, env.local_rank), (3, 4, 1));
            assert_eq!(env.kind, LauncherKind::Torchrun);
        }
        other => panic!("expected a replica, got {other:?}"),
    }
    // Without PET_ variables nothing changes.
    assert_eq!(
        placement(TORCHRUN).unwrap(),
        Role::Replica(from(TORCHRUN).unwrap())
    );
    assert_eq!(placement(&[]).unwrap(), Role::Replica(DistEnv::single()));
    for v in KUBEFLOW_VARIABLES {
        assert!(LAUNCHER_VARIABLES.contains(&v), "{v}");
    }
}

#[test]
fn kubeflow_variables_are_validated_by_name() {
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: &[Case] = &[
        (
            &[("PET_NNODES", "")],
            "PET_NNODES",
            "is not set but PET_NODE_RANK is",
        ),
        (
            &[("PET_NNODES", "3:2")],
            "PET_NNODES",
            "\"3:2\" is not a range of nodes MIN:MAX with 1 <= MIN <= MAX",
        ),
        (
            &[("PET_NNODES", "0:2")],
            "PET_NNODES",
            "\"0:2\" is not a range of nodes MIN:MAX",
        ),
        (
            &[("PET_NNODES", "two")],
            "PET_NNODES",
            "\"two\" is not a non-negative integer",
        ),
        (
            &[("PET_NNODES", "0")],
            "PET_NNODES",
            "is 0; a job needs at least one node",
        ),
        (
            &[("PET_NODE_RANK", "2"), ("RANK", "2")],
            "PET_NODE_RANK",
            "is 2 but PET_NNODES is 2; node ranks run from 0 to 1",
        ),
        (
            &[("PET_NODE_RANK", "0")],
            "PET_NODE_RANK",
            "is 0 but RANK is 1; in a Kubeflow pod both are the pod's index",
        ),
        (
            &[("PET_NODE_RANK", ""), ("RANK", "")],
            "PET_NODE_RANK",
            "is not set (nor RANK)",
        ),
        (
            &[("PET_NPROC_PER_NODE", "0")],
            "PET_NPROC_PER_NODE",
            "is 0; a node needs at least one replica",
        ),
        (
            &[("PET_NPROC_PER_NODE", "auto")],
            "PET_NPROC_PER_NODE",
            "is \"auto\"; ddp-trainer starts a fixed number of replicas in each pod: set nprocPerNode (PyTorchJob) or trainer.numProcPerNode (TrainJob)",
        ),
        (
            &[("PET_NPROC_PER_NODE", "")],
            "PET_NPROC_PER_NODE",
            "is not set; ddp-trainer starts a fixed number",
        ),
        (
            &[("WORLD_SIZE", "3")],
            "WORLD_SIZE",
            "is 3 but PET_NNODES × PET_NPROC_PER_NODE = 2 × 2 = 4",
        ),
        (
            &[("PET_MASTER_ADDR", ""), ("MASTER_ADDR", "")],
            "PET_MASTER_ADDR",
            "is not set (nor MASTER_ADDR), and the job spans 2 nodes",
        ),
        (
            &[("PET_MASTER_PORT", "70000")],
            "PET_MASTER_PORT",
            "70000 is out of range",
        ),
        (
            &[("PET_MASTER_PORT", ""), ("MASTER_PORT", "x")],
            "MASTER_PORT",
            "\"x\" is not a port number",
        ),
    ];
    for (changes, want_var, want_msg) in cases {
        let (var, msg) = node_error(&with(PYTORCHJOB, changes));
        assert_eq!(&var, want_var, "{changes:?}: {msg}");
        assert!(msg.contains(want_msg), "{changes:?}: {msg}");
    }
    // TrainJob: `auto` (GPUs without numProcPerNode) cannot be resolved without WORLD_SIZE.
    let (var, msg) = node_error(&with(TRAINJOB, &[("PET_NPROC_PER_NODE", "auto")]));
    assert_eq!(var, "PET_NPROC_PER_NODE");
    assert!(msg.contains("\"auto\""), "{msg}");
    let e = Error::Env {
        var: var.clone(),
        msg,
    };
    assert_eq!(e.exit_code(), 2);
}
