//! The replica contract through the real binary: replicas placed by Slurm's and Open MPI's
//! variables (not only torchrun's) form a group and train together.

mod common;
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
