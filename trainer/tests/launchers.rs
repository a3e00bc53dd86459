//! The replica contract through the real binary: replicas placed by Slurm's and Open MPI's
//! variables (not only torchrun's) form a group and train together, and pods of a Kubeflow job
//! start their node's replicas themselves; elastic runs (`elastic`) go on without replicas
//! killed mid-run.

mod common;
mod elastic;
use common::*;
use std::process::Stdio;
use std::time::Duration;

fn spec(dir: &std::path::Path) -> std::path::PathBuf {
    write_spec(
        dir,
        "mlp",
        "val_fraction = 0.0\nlimit_train = 256\nlimit_test = 64\n[train]\nmax_steps = 3\n[checkpoint]\nevery_epochs = 0\n",
    )
}

/// Starts `world` replicas, each with the variables `vars(rank)`, and waits for all of them.
fn run_group(world: usize, vars: impl Fn(usize) -> Vec<(String, String)>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let out = dir.path().join("out");
    let children: Vec<_> = (0..world)
        .map(|r| {
            let mut c = trainer();
            c.arg(&spec)
                .arg("--out")
                .arg(&out)
                .arg("--set")
                .arg("ddp.timeout_s=20");
            for (k, v) in vars(r) {
                c.env(k, v);
            }
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (r, child) in children.into_iter().enumerate() {
        let o = wait_output(child, Duration::from_secs(60));
        assert!(o.status.success(), "rank {r} failed\n{}", text(&o));
        if r == 0 {
            assert!(
                String::from_utf8_lossy(&o.stdout).contains(&format!("rank 0/{world}")),
                "{}",
                text(&o)
            );
        }
    }
    assert!(out.join("model.safetensors").is_file());
    assert_eq!(test_record(&out).world_size, world);
    dir
}

#[test]
fn slurm_variables_place_the_replicas() {
    let port = free_port().to_string();
    run_group(2, |r| {
        vec![
            ("SLURM_PROCID".into(), r.to_string()),
            ("SLURM_NTASKS".into(), "2".into()),
            ("SLURM_LOCALID".into(), r.to_string()),
            ("SLURM_NTASKS_PER_NODE".into(), "2".into()),
            // The master is the first host of the (compressed) node list.
            ("SLURM_JOB_NODELIST".into(), "localhost,node[02-03]".into()),
            ("MASTER_PORT".into(), port.clone()),
        ]
    });
}

#[test]
fn open_mpi_variables_place_the_replicas() {
    let port = free_port().to_string();
    run_group(2, |r| {
        vec![
            ("OMPI_COMM_WORLD_RANK".into(), r.to_string()),
            ("OMPI_COMM_WORLD_SIZE".into(), "2".into()),
            ("OMPI_COMM_WORLD_LOCAL_RANK".into(), r.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_SIZE".into(), "2".into()),
            ("MASTER_PORT".into(), port.clone()),
        ]
    });
}

#[test]
fn torchrun_variables_place_the_replicas() {
    let port = free_port().to_string();
    run_group(3, |r| {
        vec![
            ("RANK".into(), r.to_string()),
            ("WORLD_SIZE".into(), "3".into()),
            ("LOCAL_RANK".into(), r.to_string()),
            ("LOCAL_WORLD_SIZE".into(), "3".into()),
            ("MASTER_ADDR".into(), "127.0.0.1".into()),
            ("MASTER_PORT".into(), port.clone()),
            ("TORCHELASTIC_RESTART_COUNT".into(), "0".into()),
        ]
    });
}

/// Two pods of a PyTorchJob with 2 nodes × 2 replicas, as two processes on this machine with the
/// variables the training operator sets (RANK = the pod's index, WORLD_SIZE = pods): each starts
/// its two replicas, the four train as one world, and the weights are those of a local run of 4
/// replicas, bit for bit.
#[test]
fn kubeflow_pods_start_their_replicas_and_match_a_local_run() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    // One thread per replica in both runs: the same batch parts, so the same sums.
    let sets = ["ddp.threads=1", "ddp.timeout_s=30"];
    let local = dir.path().join("local");
    train_standalone(&spec, 4, &local, &sets);

    let out = dir.path().join("pods");
    let port = free_port().to_string();
    let mut pods: Vec<ChildGuard> = (0..2)
        .map(|node: usize| {
            let mut c = trainer();
            c.arg(&spec).arg("--out").arg(&out);
            for s in sets {
                c.arg("--set").arg(s);
            }
            c.env("PET_NNODES", "2")
                .env("PET_NPROC_PER_NODE", "2")
                .env("PET_NODE_RANK", node.to_string())
                .env("RANK", node.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            ChildGuard::new(c.spawn().unwrap())
        })
        .collect();
    for (node, pod) in pods.iter_mut().enumerate() {
        let o = wait_output(pod.take(), Duration::from_secs(120));
        assert!(o.status.success(), "pod {node} failed\n{}", text(&o));
        let first = 2 * node;
        let line = format!(
            "node {node}/2 via kubeflow: ranks {first}-{} of 4",
            first + 1
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(&line),
            "{}",
            text(&o)
        );
    }
    for rank in 0..4 {
        let log = std::fs::read_to_string(out.join(format!("logs/rank-{rank}.log"))).unwrap();
        assert!(
            log.contains(&format!("rank {rank}/4 (local {}/2)", rank % 2)),
            "{log}"
        );
    }
    assert_eq!(test_record(&out).world_size, 4);
    let weights = |d: &std::path::Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(
        weights(&out) == weights(&local),
        "the pods' weights differ from the local run's: max |diff| {}",
        max_abs_diff(
            &load_model(&out.join("model.safetensors")),
            &load_model(&local.join("model.safetensors"))
        )
    );
}

/// A pod whose variables do not add up fails at once, naming the variable, with exit code 2.
#[test]
fn a_pod_with_inconsistent_variables_names_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let mut c = trainer();
    c.arg(&spec)
        .arg("--out")
        .arg(dir.path().join("out"))
        .env("PET_NNODES", "2")
        .env("PET_NPROC_PER_NODE", "2")
        .env("PET_NODE_RANK", "2")
        .env("MASTER_ADDR", "127.0.0.1");
    let o = run_with_timeout(c, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "environment variable PET_NODE_RANK: is 2 but PET_NNODES is 2; node ranks run from 0 to 1"
        ),
        "{}",
        text(&o)
    );
    assert!(!dir.path().join("out").exists());
}
