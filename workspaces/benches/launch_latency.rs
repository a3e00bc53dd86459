//! Launch latency benchmark (prints figures):
//! `cargo bench -p ddp-workspaces --bench launch_latency`
//!
//! For a detached 2-replica CPU run it measures, from the moment the command is invoked: when the
//! supervisor is about to start the replicas (run.json `started`: the workspace's own overhead),
//! and when rank 0 finished its first training step (first train record): the difference is the
//! trainer's own start-up (data loading, rendezvous, first step).
//!
//! The command is this executable started as `EXE __launch WORKSPACE SPEC`, which does what
//! `ddp run --detach SPEC` does (`actions::start_run`, then exit), so the bench is a front end of
//! its own: the run's supervisor and replicas are started from it too
//! (`ddp_workspaces::run_hidden_command`).

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ddp_workspaces::actions::{self, NewRun};
use ddp_workspaces::metrics::MetricKind;
use ddp_workspaces::{Run, Workspace};

/// The hidden sub-command that starts one detached run, as `ddp run --detach` does.
const LAUNCH: &str = "__launch";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(code) = ddp_workspaces::run_hidden_command(&args) {
        return code;
    }
    if args.get(1).is_some_and(|a| a == LAUNCH) {
        return launch(Path::new(&args[2]), Path::new(&args[3]));
    }
    bench();
    ExitCode::SUCCESS
}

/// `EXE __launch WORKSPACE SPEC`: starts the run and exits, leaving its supervisor running.
fn launch(root: &Path, spec: &Path) -> ExitCode {
    let req = NewRun {
        command: vec!["ddp".into(), "run".into(), "--detach".into()],
        ..NewRun::new(spec)
    };
    match actions::start_run(root, &req) {
        Ok(started) => {
            println!(
                "run {} in {}",
                started.run.record.id,
                started.run.dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("launch: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench() {
    let exe = std::env::current_exe().unwrap();
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
        let o = Command::new(&exe)
            .arg(LAUNCH)
            .arg(&ws)
            .arg(&spec)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let run = Workspace::open(&ws).unwrap().runs().unwrap().0.remove(0);
        let deadline = Instant::now() + Duration::from_secs(60);
        let first = loop {
            let m = run.metrics().unwrap_or_default();
            if let Some(r) = m.iter().find(|r| r.kind == MetricKind::Train) {
                break r.time;
            }
            assert!(Instant::now() < deadline, "no first step");
            std::thread::sleep(Duration::from_millis(5));
        };
        let started = Run::load(&run.dir).unwrap().record.started.unwrap();
        overheads.push(started - t0);
        startups.push(first - started);
        while !Run::load_checked(&run.dir)
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
