//! Launch latency benchmark (prints figures):
//! `cargo bench -p ddp-workspaces --bench launch_latency`
//!
//! For `ddp run --detach` of a 2-replica CPU run it measures, from the moment the command is
//! invoked: when the supervisor is about to start the replicas (run.json `started`: the
//! workspace's own overhead), and when rank 0 finished its first training step (first train
//! record): the difference is the trainer's own start-up (data loading, rendezvous, first step).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ddp_workspaces::Workspace;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/mnist-sample");
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"latency\"\n[model]\nname = \"mnist-cnn\"\n[data]\nname = \"mnist\"\npath = \"{}\"\n[train]\nepochs = 1\nmax_steps = 3\nlog_every = 1\n[ddp]\nreplicas = 2\n[checkpoint]\nevery_epochs = 0\n",
            data.display()
        ),
    )
    .unwrap();
    let mut overheads = vec![];
    let mut startups = vec![];
    for i in 0..5 {
        let ws = dir.path().join(format!("ws{i}"));
        let t0 = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let o = Command::new(env!("CARGO_BIN_EXE_ddp"))
            .arg("--workspace")
            .arg(&ws)
            .args(["run", "--detach"])
            .arg(&spec)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let run = Workspace::open(&ws).unwrap().runs().unwrap().0.remove(0);
        let deadline = Instant::now() + Duration::from_secs(60);
        let first = loop {
            let m = run.metrics().unwrap_or_default();
            if let Some(r) = m
                .iter()
                .find(|r| r.kind == ddp_trainer::metrics::MetricKind::Train)
            {
                break r.time;
            }
            assert!(Instant::now() < deadline, "no first step");
            std::thread::sleep(Duration::from_millis(5));
        };
        let started = ddp_workspaces::Run::load(&run.dir)
            .unwrap()
            .record
            .started
            .unwrap();
        overheads.push(started - t0);
        startups.push(first - started);
        while !ddp_workspaces::Run::load_checked(&run.dir)
            .unwrap()
            .record
            .status
            .is_terminal()
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "launch latency (5 runs, median): ddp run → replicas starting {:.3} s; replicas starting → first step {:.3} s (trainer start-up + one step)",
        median(&mut overheads),
        median(&mut startups)
    );
}
