//! What the latency benchmarks share: paced writers, the latency summary, and running each mode
//! (`notify`, `polling`) on its own 2-worker tokio runtime.

use std::fs::OpenOptions;
use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Runs `bench(use_notify)` for `notify` then `polling`, each on a fresh multi-thread runtime
/// with 2 workers. Arguments that do not start with `-` (after `cargo bench ... --`) pick the
/// modes whose name contains one of them: `cargo bench -p ddp-workspaces --bench NAME -- notify`.
pub fn run_modes<F: Future<Output = ()>>(bench: impl Fn(bool) -> F) {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, use_notify) in [("notify", true), ("polling", false)] {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(bench(use_notify));
    }
}

/// Benchmark writers: one thread per path appending `rate` lines per second for `seconds`
/// (in bursts every 0.5 ms, paced against `base`); `line(seq, nanos since base)` makes a line.
pub fn paced_writers(
    paths: Vec<PathBuf>,
    rate: u64,
    seconds: u64,
    base: Instant,
    line: fn(u64, u128) -> String,
) -> Vec<std::thread::JoinHandle<()>> {
    paths
        .into_iter()
        .map(|path| {
            std::thread::spawn(move || {
                let mut f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .unwrap();
                let total = rate * seconds;
                let mut seq = 0;
                while seq < total {
                    let due = (base.elapsed().as_micros() as u64 * rate / 1_000_000).min(total);
                    while seq < due {
                        f.write_all(line(seq, base.elapsed().as_nanos()).as_bytes())
                            .unwrap();
                        seq += 1;
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
            })
        })
        .collect()
}

/// "p50 …, p99 …, max … ms" of latencies in milliseconds (sorts them).
pub fn latency_summary(latencies: &mut [f64]) -> String {
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.5),
        pct(0.99),
        latencies[latencies.len() - 1]
    )
}
