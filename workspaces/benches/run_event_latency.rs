//! Typed run event latency benchmark (prints figures): `cargo bench -p ddp-workspaces --bench
//! run_event_latency [-- notify|polling]`.
//!
//! Latency from `write` to the `RunEvent::Log` being delivered by `Workspace::watch_with`, at
//! 10,000 lines/s spread over 8 ranks' log files for 5 s, printed as p50/p99/max, with notify and
//! with polling only.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{latency_summary, paced_writers, run_modes};
use ddp_workspaces::files::watch::WatchOptions;
use ddp_workspaces::follow::events::RunWatchOptions;
use ddp_workspaces::spec::Spec;
use ddp_workspaces::{RunEvent, RunStatus, WatchFrom, Workspace};

fn main() {
    run_modes(latency_benchmark);
}

/// Latency from `write` to the `RunEvent::Log` being delivered, at 10,000 lines/s spread
/// over 8 ranks' log files, printed as p50/p99/max.
async fn latency_benchmark(use_notify: bool) {
    const RANKS: usize = 8;
    const RATE_PER_RANK: u64 = 1250;
    const SECONDS: u64 = 5;
    // A running run's folder, made as a front end makes one.
    let tmp = tempfile::tempdir().unwrap();
    let ws = Workspace::open_or_create(tmp.path()).unwrap();
    let spec = "name = \"bench\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n";
    let spec = Spec::parse(spec, Path::new("bench.toml"), &[]).unwrap();
    let mut run = ws.create_run(&spec, vec![], None, None).unwrap();
    run.update(|r| r.status = RunStatus::Running).unwrap();

    let options = RunWatchOptions {
        files: WatchOptions {
            use_notify,
            ..WatchOptions::default()
        },
        ..RunWatchOptions::default()
    };
    let mut watch = ws.watch_with(&run, WatchFrom::Now, options);
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next()).await;
    assert!(
        matches!(first, Ok(Some(RunEvent::Status(_)))),
        "expected the run's status first, got {first:?}"
    );
    let base = Instant::now();
    let paths = (0..RANKS).map(|rank| run.log_path(rank)).collect();
    let writers = paced_writers(paths, RATE_PER_RANK, SECONDS, base, |seq, nanos| {
        format!("seq {seq} t {nanos} epoch 1 step {seq} loss 2.3\n")
    });
    let expected = RANKS * (RATE_PER_RANK * SECONDS) as usize;
    let mut latencies = Vec::with_capacity(expected);
    let mut next_seq = [0u128; RANKS];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(SECONDS + 10);
    while latencies.len() < expected {
        let got = tokio::time::timeout_at(deadline, watch.next()).await;
        let Ok(Some(event)) = got else {
            panic!("got {} of {expected} lines", latencies.len());
        };
        let now = base.elapsed().as_nanos();
        let RunEvent::Log {
            rank: Some(rank),
            line,
        } = event
        else {
            continue; // a status change
        };
        let fields: Vec<u128> = line.split(' ').filter_map(|s| s.parse().ok()).collect();
        assert_eq!(fields[0], next_seq[rank], "out of order for rank {rank}");
        next_seq[rank] += 1;
        latencies.push((now - fields[1]) as f64 / 1e6);
    }
    for w in writers {
        w.join().unwrap();
    }
    println!(
        "RunEvent latency (notify: {use_notify}), {expected} lines over {RANKS} rank logs in \
         {SECONDS} s: {}",
        latency_summary(&mut latencies)
    );
}
