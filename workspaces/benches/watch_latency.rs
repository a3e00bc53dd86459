//! File watch latency benchmark (prints figures): `cargo bench -p ddp-workspaces --bench
//! watch_latency [-- notify|polling]`.
//!
//! Latency from `write` to delivery by `watch::watch_dir_with` at 10,000 lines/s over 8 files
//! for 3 s, printed as p50/p99/max, with notify and with polling only.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{latency_summary, paced_writers, run_modes};
use ddp_workspaces::files::tail::TailFrom;
use ddp_workspaces::files::watch::{WatchOptions, watch_dir_with};
use tokio_util::sync::CancellationToken;

fn main() {
    run_modes(latency_benchmark);
}

/// Latency from `write` to delivery at 10,000 lines/s over 8 files, printed as p50/p99/max.
async fn latency_benchmark(use_notify: bool) {
    const FILES: usize = 8;
    const RATE_PER_FILE: u64 = 1250;
    const SECONDS: u64 = 3;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("logs")).unwrap();
    std::fs::create_dir(dir.path().join("metrics")).unwrap();
    let cancel = CancellationToken::new();
    let options = WatchOptions {
        use_notify,
        ..WatchOptions::default()
    };
    let mut rx = watch_dir_with(
        dir.path().into(),
        |_| true,
        TailFrom::End,
        cancel.clone(),
        options,
    );
    let base = Instant::now();
    let paths = (0..FILES)
        .map(|rank| dir.path().join(format!("metrics/rank-{rank}.jsonl")))
        .collect();
    let writers = paced_writers(paths, RATE_PER_FILE, SECONDS, base, |seq, nanos| {
        format!("{{\"seq\":{seq},\"t\":{nanos}}}\n")
    });
    let expected = FILES * (RATE_PER_FILE * SECONDS) as usize;
    let mut latencies = Vec::with_capacity(expected);
    let mut next_seq = BTreeMap::<PathBuf, u64>::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(SECONDS + 5);
    while latencies.len() < expected {
        let got = tokio::time::timeout_at(deadline, rx.recv()).await;
        let Ok(Some(line)) = got else {
            panic!("got {} of {expected} lines", latencies.len());
        };
        let now = base.elapsed().as_nanos();
        let fields: Vec<u128> = line
            .line
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        let seq = next_seq.entry(line.path.clone()).or_default();
        assert_eq!(fields[0], *seq as u128, "out of order in {:?}", line.path);
        *seq += 1;
        latencies.push((now - fields[1]) as f64 / 1e6);
    }
    for w in writers {
        w.join().unwrap();
    }
    cancel.cancel();
    println!(
        "watch latency (notify: {use_notify}), {expected} lines over {FILES} files in \
         {SECONDS} s: {}",
        latency_summary(&mut latencies)
    );
}
