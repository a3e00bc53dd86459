//! `ddp.bucket_mb = "auto"`: the link measured with a few all-reduces at start, and the bucket
//! size that trades a bucket's fixed cost against the wait for the last one.
//!
//! With buckets of b bytes, G bytes of gradients, a message cost α (the time of an all-reduce of
//! almost nothing: the ring's hops, the thread hand-off) and a bandwidth β (bytes of buffer
//! all-reduced per second), the step pays about (G / b) · α in per-bucket costs and b / β for the
//! last bucket, which only starts when backward ends. Their sum is smallest at
//! b = √(G · α · β), kept within 1 MiB (PyTorch's first bucket) and 25 MiB (its default).

use std::time::{Duration, Instant};

use super::{Collective, ReduceOp};
use crate::Result;

/// What the probe measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Time of an all-reduce of a few bytes.
    pub latency: Duration,
    /// Bytes of buffer all-reduced per second.
    pub bytes_per_s: f64,
}

/// Smallest and largest automatic bucket.
pub const AUTO_MIN: usize = 1 << 20;
pub const AUTO_MAX: usize = 25 << 20;

/// The floats of the probe's large all-reduce (4 MiB).
const LARGE: usize = 1 << 20;
const SMALL: usize = 16;

/// Measures the link between the ranks of `c` (every rank calls it at the same point): the
/// fastest of 5 small and of 2 large all-reduces, after one of each to warm up.
pub fn measure(c: &mut dyn Collective) -> Result<Link> {
    let mut small = vec![0f32; SMALL];
    let mut large = vec![0f32; LARGE];
    let mut time = |buf: &mut [f32], n: usize| -> Result<Duration> {
        let mut best = Duration::MAX;
        for _ in 0..n {
            let t = Instant::now();
            c.all_reduce(buf, ReduceOp::Sum)?;
            best = best.min(t.elapsed());
        }
        Ok(best)
    };
    time(&mut small, 1)?;
    time(&mut large, 1)?;
    let latency = time(&mut small, 5)?;
    let t_large = time(&mut large, 2)?;
    let bytes = ((LARGE - SMALL) * 4) as f64;
    let secs = (t_large.saturating_sub(latency)).as_secs_f64().max(1e-9);
    Ok(Link {
        latency,
        bytes_per_s: bytes / secs,
    })
}

/// The bucket size for `grad_bytes` of gradients over `link`: √(G · α · β) within
/// [`AUTO_MIN`]..=[`AUTO_MAX`].
pub fn auto_bucket_bytes(link: &Link, grad_bytes: usize) -> usize {
    let ideal = (grad_bytes as f64 * link.latency.as_secs_f64() * link.bytes_per_s).sqrt();
    (ideal as usize).clamp(AUTO_MIN, AUTO_MAX)
}

/// [`measure`], then rank 0's [`auto_bucket_bytes`] for every rank (buckets must agree): the
/// size, and rank 0's measurement.
pub fn agreed_bucket_bytes(c: &mut dyn Collective, grad_bytes: usize) -> Result<(usize, Link)> {
    let mine = measure(c)?;
    // KiB, exact in an f32; with rank 0's figures.
    let mut msg = [
        (auto_bucket_bytes(&mine, grad_bytes) >> 10) as f32,
        mine.latency.as_secs_f64() as f32,
        mine.bytes_per_s as f32,
    ];
    c.broadcast(&mut msg, 0)?;
    let link = Link {
        latency: Duration::from_secs_f64(f64::from(msg[1])),
        bytes_per_s: f64::from(msg[2]),
    };
    Ok(((msg[0] as usize) << 10, link))
}

/// The unclamped optimum, for the log line.
pub fn ideal_bucket_bytes(link: &Link, grad_bytes: usize) -> f64 {
    (grad_bytes as f64 * link.latency.as_secs_f64() * link.bytes_per_s).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::ring::tests::with_ring;

    fn link(latency_ms: f64, mb_per_s: f64) -> Link {
        Link {
            latency: Duration::from_secs_f64(latency_ms / 1e3),
            bytes_per_s: mb_per_s * 1e6,
        }
    }

    #[test]
    fn the_bucket_balances_message_cost_against_the_last_bucket() {
        // 45 MB of gradients, 1 ms a message at 125 MB/s: √(45e6 · 1e-3 · 125e6) ≈ 2.37 MB.
        let b = auto_bucket_bytes(&link(1.0, 125.0), 45_000_000);
        assert!((2_300_000..2_400_000).contains(&b), "{b}");
        // A fast link with small messages: the 1 MiB floor. A slow, far link: the 25 MiB cap.
        assert_eq!(auto_bucket_bytes(&link(0.05, 25.0), 45_000_000), AUTO_MIN);
        assert_eq!(
            auto_bucket_bytes(&link(50.0, 1000.0), 400_000_000),
            AUTO_MAX
        );
    }

    #[test]
    fn the_ranks_agree_on_rank_0s_measure() {
        let got = with_ring(3, Duration::from_secs(10), |_, ring| {
            agreed_bucket_bytes(ring, 45_000_000).unwrap()
        });
        for (b, l) in &got {
            assert_eq!((b, l), (&got[0].0, &got[0].1));
            assert!(
                l.latency > Duration::ZERO && l.latency < Duration::from_secs(1),
                "{l:?}"
            );
            assert!(l.bytes_per_s > 1e6, "{l:?}");
            assert!((AUTO_MIN..=AUTO_MAX).contains(b) && b % 1024 == 0, "{b}");
        }
    }
}
