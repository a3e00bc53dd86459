//! All-reduce benchmark with the same protocol as `bench/pytorch/torch_allreduce.py` (the gloo
//! reference): per size, 3 warm-up sums of a buffer of ones, then 10 timed ones each after a
//! barrier; the median is `times[10 / 2]` of the sorted times. Bandwidths follow nccl-tests:
//! algbw = bytes / median, busbw = algbw · 2(W−1)/W, in GB/s (10⁹ bytes).

use std::time::Instant;

use super::{Collective, ReduceOp};
use crate::Result;

const WARMUP: usize = 3;
const TIMED: usize = 10;

/// One benchmarked size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllReduceFigure {
    pub bytes: usize,
    pub median_s: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
}

impl AllReduceFigure {
    /// The figure as one JSON line with the reference script's keys.
    pub fn json_line(&self, engine: &str, world: usize) -> String {
        format!(
            "{{\"engine\": \"{engine}\", \"world\": {world}, \"bytes\": {}, \"median_s\": {:.6}, \
             \"algbw_GBps\": {:.3}, \"busbw_GBps\": {:.3}}}",
            self.bytes, self.median_s, self.algbw_gbps, self.busbw_gbps
        )
    }
}

/// Times a sum all-reduce of `bytes / 4` f32 for each size. Every rank must call it with the
/// same sizes; every rank gets the figures (of its own clock).
pub fn bench_all_reduce(
    c: &mut dyn Collective,
    sizes_bytes: &[usize],
) -> Result<Vec<AllReduceFigure>> {
    let world = c.world_size() as f64;
    let mut figures = Vec::with_capacity(sizes_bytes.len());
    for &bytes in sizes_bytes {
        let mut buf = vec![1.0f32; bytes / 4];
        for _ in 0..WARMUP {
            c.all_reduce(&mut buf, ReduceOp::Sum)?;
        }
        let mut times = [0f64; TIMED];
        for t in &mut times {
            c.barrier()?;
            let t0 = Instant::now();
            c.all_reduce(&mut buf, ReduceOp::Sum)?;
            *t = t0.elapsed().as_secs_f64();
        }
        times.sort_by(f64::total_cmp);
        let median_s = times[TIMED / 2];
        let algbw_gbps = bytes as f64 / median_s / 1e9;
        figures.push(AllReduceFigure {
            bytes,
            median_s,
            algbw_gbps,
            busbw_gbps: algbw_gbps * 2.0 * (world - 1.0) / world,
        });
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::ring::TcpRing;
    use crate::dist::store::{StoreClient, StoreServer};
    use std::time::Duration;

    #[test]
    fn figures_for_two_ranks() {
        let server = StoreServer::bind("127.0.0.1", 0, 2, None).unwrap();
        let port = server.port();
        let t = Duration::from_secs(5);
        let results: Vec<Vec<AllReduceFigure>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|rank| {
                    s.spawn(move || {
                        let mut store =
                            StoreClient::connect("127.0.0.1", port, rank, 2, None, t).unwrap();
                        let ip = store.local_ip().unwrap();
                        let mut ring = TcpRing::connect(&mut store, rank, 2, ip, None, t).unwrap();
                        let figures = bench_all_reduce(&mut ring, &[4096, 1 << 20]).unwrap();
                        // Barriers + (3 + 10) all-reduces per size.
                        assert_eq!(ring.seq(), 2 * (WARMUP + 2 * TIMED) as u64);
                        figures
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for figures in results {
            assert_eq!(
                figures.iter().map(|f| f.bytes).collect::<Vec<_>>(),
                [4096, 1 << 20]
            );
            for f in figures {
                assert!(f.median_s > 0.0);
                assert_eq!(f.algbw_gbps, f.bytes as f64 / f.median_s / 1e9);
                // 2(W−1)/W = 1 for two ranks.
                assert_eq!(f.busbw_gbps, f.algbw_gbps);
            }
        }
    }

    #[test]
    fn one_rank_has_no_bus_traffic() {
        let mut ring = TcpRing::single(Duration::from_secs(1));
        let f = bench_all_reduce(&mut ring, &[1 << 16]).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].busbw_gbps, 0.0);
        let line = AllReduceFigure {
            bytes: 1 << 20,
            median_s: 0.00125,
            algbw_gbps: 0.8388608,
            busbw_gbps: 0.8388608,
        }
        .json_line("tcp", 2);
        assert_eq!(
            line,
            "{\"engine\": \"tcp\", \"world\": 2, \"bytes\": 1048576, \"median_s\": 0.001250, \
             \"algbw_GBps\": 0.839, \"busbw_GBps\": 0.839}"
        );
    }
}
