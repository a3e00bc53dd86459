use super::head::HEAD_LEN;
use super::*;
use crate::dist::codec::Codec;
use crate::dist::handshake::{self, RING_PURPOSE};
use crate::dist::store::StoreServer;
use crate::dist::wire::Refusal;
use std::net::TcpStream;
use std::sync::{Barrier, Mutex, mpsc};

const T: Duration = Duration::from_secs(5);

/// Runs `f(rank, ring)` on `w` threads joined in a ring through a fresh store; returns the
/// results in rank order.
pub(crate) fn with_ring<R: Send>(
    w: usize,
    timeout: Duration,
    f: impl Fn(usize, &mut TcpRing) -> R + Sync,
) -> Vec<R> {
    with_ring_token(w, timeout, None, |rank, ring| {
        f(rank, ring.expect("ring setup failed"))
    })
}

fn with_ring_token<R: Send>(
    w: usize,
    timeout: Duration,
    token: Option<&str>,
    f: impl Fn(usize, Result<&mut TcpRing>) -> R + Sync,
) -> Vec<R> {
    let server = StoreServer::bind("127.0.0.1", 0, w, token.map(String::from)).unwrap();
    let port = server.port();
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..w)
            .map(|rank| {
                s.spawn(move || {
                    let mut store =
                        StoreClient::connect("127.0.0.1", port, rank, w, token, T).unwrap();
                    let ip = store.local_ip().unwrap();
                    match TcpRing::connect(&mut store, rank, w, ip, token, timeout) {
                        Ok(mut ring) => f(rank, Ok(&mut ring)),
                        Err(e) => f(rank, Err(e)),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Integer-valued data, so every partial sum is exact whatever the reduction order.
pub(crate) fn data(rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (i % 97) as f32 + 1000.0 * rank as f32)
        .collect()
}

/// The exact element-wise sum of `data(r, n)` over `w` ranks.
pub(crate) fn sum_of(w: usize, n: usize) -> Vec<f32> {
    let per_rank: Vec<Vec<f32>> = (0..w).map(|r| data(r, n)).collect();
    (0..n)
        .map(|i| per_rank.iter().map(|d| d[i]).sum())
        .collect()
}

pub(crate) fn collective_err<T: std::fmt::Debug>(
    r: Result<T>,
) -> (&'static str, u64, usize, Option<usize>, String) {
    match r {
        Err(Error::Collective {
            op,
            seq,
            rank,
            peer,
            msg,
        }) => (op, seq, rank, peer, msg),
        other => panic!("expected a collective error, got {other:?}"),
    }
}

#[test]
fn segments_cover_the_buffer() {
    for n in [0, 1, 2, 5, 1001] {
        for w in 1..6 {
            let segs: Vec<_> = (0..w).map(|i| segment(n, w, i)).collect();
            assert_eq!(segs[0].start, 0);
            assert_eq!(segs[w - 1].end, n);
            for pair in segs.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
            }
            assert!(segs.iter().all(|s| s.len() <= n.div_ceil(w)));
        }
    }
    let mut v = [0, 1, 2, 3, 4, 5];
    let (a, b) = disjoint(&mut v, 4..6, 1..3);
    assert_eq!(a, [4, 5]);
    assert_eq!(b, [1, 2]);
    let (a, b) = disjoint(&mut v, 0..1, 3..3);
    assert_eq!(a, [0]);
    assert!(b.is_empty());
}

#[test]
fn head_round_trips_and_describes_itself() {
    let h = Head {
        op: OpCode::Broadcast,
        seq: 9,
        count: 100,
        extra: 2,
    };
    assert_eq!(Head::decode(&h.encode()), Some(h));
    assert_eq!(h.describe(), "broadcast #9 (root 2, 100 elements)");
    assert_eq!(Head::decode(&[0; HEAD_LEN]), None);
}

#[test]
fn a_compressed_all_reduce_adds_in_f32_and_ends_with_the_same_bits_everywhere() {
    for codec in [Codec::Bf16, Codec::F16] {
        for w in [2, 3] {
            for n in [0, 1, 1001, 200_000] {
                // Small gradients of mixed sign, as a network's are.
                let grads = |rank: usize| -> Vec<f32> {
                    (0..n)
                        .map(|i| (((i * 31 + rank * 17) % 101) as f32 - 50.0) * 1e-3)
                        .collect()
                };
                let results = with_ring(w, T, |rank, ring| {
                    let mut g = grads(rank);
                    ring.all_reduce_coded(&mut g, ReduceOp::Avg, codec).unwrap();
                    // The ring is in step afterwards: a plain op follows.
                    let mut one = [1.0];
                    ring.all_reduce(&mut one, ReduceOp::Sum).unwrap();
                    assert_eq!(one[0], w as f32);
                    g
                });
                let all: Vec<Vec<f32>> = (0..w).map(grads).collect();
                let exact: Vec<f32> = (0..n)
                    .map(|i| all.iter().map(|g| g[i]).sum::<f32>() / w as f32)
                    .collect();
                let tol = match codec {
                    Codec::Bf16 => 1.0 / 128.0,
                    Codec::F16 => 1.0 / 1024.0,
                };
                for (rank, got) in results.iter().enumerate() {
                    assert!(
                        *got == results[0],
                        "{codec:?} w {w} n {n}: rank {rank} differs"
                    );
                    for (g, e) in got.iter().zip(&exact) {
                        // A few roundings of the partial sums: within a few units of the
                        // 16-bit precision of the largest term (0.05).
                        assert!((g - e).abs() <= 3.0 * tol * 0.05, "{codec:?}: {g} vs {e}");
                    }
                }
                // Exactly what 16 bits hold.
                let mut rounded = results[0].clone();
                codec.round(&mut rounded);
                assert!(rounded == results[0]);
            }
        }
    }
}

#[test]
fn all_reduce_sum_and_avg() {
    for w in [2, 3, 4] {
        for n in [0, 1, 2, 1001, 3_000_000] {
            let results = with_ring(w, T, |rank, ring| {
                let mut sum = data(rank, n);
                ring.all_reduce(&mut sum, ReduceOp::Sum).unwrap();
                let mut avg = data(rank, n);
                ring.all_reduce(&mut avg, ReduceOp::Avg).unwrap();
                assert_eq!(ring.seq(), 2);
                (sum, avg)
            });
            let expected = sum_of(w, n);
            let inv = 1.0 / w as f32;
            let expected_avg: Vec<f32> = expected.iter().map(|s| s * inv).collect();
            for (rank, (sum, avg)) in results.into_iter().enumerate() {
                assert!(
                    sum == expected,
                    "sum differs on rank {rank}, world {w}, n {n}"
                );
                assert!(
                    avg == expected_avg,
                    "avg differs on rank {rank}, world {w}, n {n}"
                );
            }
        }
    }
}

/// Values whose sums depend on the order of the additions, to compare bits.
pub(crate) fn rough_data(rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 0.37 + rank as f32 * 1.3).sin() * 1e3).fract() * 7.1)
        .collect()
}

/// Checks `reduce_scatter` and `all_gather_shards` on one rank of a group (every rank calls
/// it at once): the shards tile the buffer, the reduced shard has the all-reduce's bits, and
/// the gather brings every rank's shard to every rank. Returns the gathered buffer.
pub(crate) fn check_shards(c: &mut dyn Collective, n: usize) -> Vec<f32> {
    let (rank, w) = (c.rank(), c.world_size());
    let shards: Vec<_> = (0..w).map(|q| c.shard(n, q)).collect();
    let mut covered = vec![0u8; n];
    for s in &shards {
        s.clone().for_each(|i| covered[i] += 1);
    }
    assert!(
        covered.iter().all(|&k| k == 1),
        "shards {shards:?} do not tile {n}"
    );
    let mut whole = rough_data(rank, n);
    c.all_reduce(&mut whole, ReduceOp::Avg).unwrap();
    let mut part = rough_data(rank, n);
    c.reduce_scatter(&mut part, ReduceOp::Avg).unwrap();
    let mine = shards[rank].clone();
    assert!(
        part[mine.clone()] == whole[mine.clone()],
        "rank {rank}: reduced shard {mine:?} differs from the all-reduce (world {w}, n {n})"
    );
    let mut gathered = vec![-1.0; n];
    gathered[mine.clone()].copy_from_slice(&part[mine]);
    c.all_gather_shards(&mut gathered).unwrap();
    assert!(
        gathered == whole,
        "rank {rank}: gathered shards differ from the all-reduce (world {w}, n {n})"
    );
    gathered
}

#[test]
fn reduce_scatter_and_all_gather_shards_make_an_all_reduce() {
    for w in [2, 3, 4] {
        for n in [0, 1, 2, 5, 1001, 300_007] {
            let seqs = with_ring(w, T, |_, ring| {
                check_shards(ring, n);
                ring.seq()
            });
            assert!(seqs.iter().all(|&s| s == 3), "{seqs:?}");
        }
    }
    // A ring of one: the whole buffer is its shard, nothing moves.
    let mut one = TcpRing::single(T);
    assert_eq!(one.shard(7, 0), 0..7);
    let mut buf = vec![1.5; 7];
    one.reduce_scatter(&mut buf, ReduceOp::Avg).unwrap();
    one.all_gather_shards(&mut buf).unwrap();
    assert_eq!(buf, vec![1.5; 7]);
}

#[test]
fn broadcast_from_every_root() {
    for w in [2, 3, 4] {
        for n in [0, 3, 1001, 1_000_000] {
            let results = with_ring(w, T, |rank, ring| {
                (0..w)
                    .map(|root| {
                        let mut buf = data(rank, n);
                        ring.broadcast(&mut buf, root).unwrap();
                        buf
                    })
                    .collect::<Vec<_>>()
            });
            for per_rank in results {
                for (root, buf) in per_rank.into_iter().enumerate() {
                    assert!(
                        buf == data(root, n),
                        "broadcast from {root} in world {w}, n {n}"
                    );
                }
            }
        }
    }
}

#[test]
fn all_gather_in_rank_order() {
    for w in [2, 3] {
        for n in [0, 1, 5, 100_000] {
            let results = with_ring(w, T, |rank, ring| {
                let mut out = vec![-1.0; n * w];
                ring.all_gather(&data(rank, n), &mut out).unwrap();
                out
            });
            let expected: Vec<f32> = (0..w).flat_map(|r| data(r, n)).collect();
            assert!(
                results.iter().all(|out| *out == expected),
                "world {w}, n {n}"
            );
        }
    }
}

#[test]
fn all_gather_checks_the_output_length() {
    let results = with_ring(2, T, |_, ring| {
        collective_err(ring.all_gather(&[1.0; 3], &mut [0.0; 5]))
    });
    let (op, seq, rank, peer, msg) = &results[1];
    assert_eq!((*op, *seq, *rank, *peer), ("all_gather", 1, 1, None));
    assert_eq!(
        msg,
        "output has 5 elements but input × world size is 3 × 2 = 6"
    );
}

#[test]
fn all_gather_bytes_with_different_lengths() {
    for w in [2, 3, 4] {
        let results = with_ring(w, T, |rank, ring| {
            let msg: Vec<u8> = (0..rank * 3).map(|i| (rank * 10 + i) as u8).collect();
            let first = ring.all_gather_bytes(&msg).unwrap();
            let big = ring
                .all_gather_bytes(&vec![rank as u8; 200_000 * (rank % 2)])
                .unwrap();
            (first, big)
        });
        for (first, big) in results {
            for r in 0..w {
                assert_eq!(
                    first[r],
                    (0..r * 3).map(|i| (r * 10 + i) as u8).collect::<Vec<_>>()
                );
                assert_eq!(big[r], vec![r as u8; 200_000 * (r % 2)]);
            }
        }
    }
}

#[test]
fn barrier_waits_for_the_last_rank() {
    let entered = Instant::now();
    let results = with_ring(3, T, |rank, ring| {
        if rank == 2 {
            std::thread::sleep(Duration::from_millis(300));
        }
        ring.barrier().unwrap();
        let left = Instant::now();
        for _ in 0..50 {
            ring.barrier().unwrap();
        }
        left
    });
    for left in results {
        assert!(left - entered >= Duration::from_millis(300));
    }
}

#[test]
fn world_of_one_needs_no_sockets() {
    let mut ring = TcpRing::single(T);
    let mut buf = vec![1.0, 2.0];
    ring.all_reduce(&mut buf, ReduceOp::Avg).unwrap();
    ring.broadcast(&mut buf, 0).unwrap();
    assert_eq!(buf, [1.0, 2.0]);
    let mut out = [0.0; 2];
    ring.all_gather(&buf, &mut out).unwrap();
    assert_eq!(out, [1.0, 2.0]);
    assert_eq!(ring.all_gather_bytes(b"x").unwrap(), vec![b"x".to_vec()]);
    ring.barrier().unwrap();
    let (op, seq, _, _, msg) = collective_err(ring.broadcast(&mut buf, 1));
    assert_eq!((op, seq), ("broadcast", 6));
    assert_eq!(msg, "root 1 is out of range for world size 1");
}

#[test]
fn many_consecutive_ops_reuse_buffers() {
    let results = with_ring(3, T, |rank, ring| {
        let mut big = data(rank, 1_000_000);
        ring.all_reduce(&mut big, ReduceOp::Sum).unwrap();
        let capacity = ring.stage_capacity();
        let mut checks = 0;
        for k in 0..300 {
            let n = (k * 7919) % 5000;
            let mut buf = data(rank, n);
            match k % 4 {
                0 => ring.all_reduce(&mut buf, ReduceOp::Sum).unwrap(),
                1 => ring.broadcast(&mut buf, k % 3).unwrap(),
                2 => ring.barrier().unwrap(),
                _ => ring.all_reduce(&mut buf, ReduceOp::Avg).unwrap(),
            }
            let expected: Vec<f32> = match k % 4 {
                0 => sum_of(3, n),
                1 => data(k % 3, n),
                2 => data(rank, n),
                _ => sum_of(3, n).iter().map(|s| s * (1.0 / 3.0)).collect(),
            };
            assert!(buf == expected, "op {k} on rank {rank}");
            checks += 1;
        }
        assert_eq!(
            ring.stage_capacity(),
            capacity,
            "the staging buffer was reallocated"
        );
        assert_eq!(ring.seq(), 301);
        checks
    });
    assert_eq!(results, [300, 300, 300]);
}

#[test]
fn mismatched_ops_fail_with_both_descriptions() {
    let results = with_ring(2, T, |rank, ring| {
        let mut buf = vec![1.0; 10 + rank];
        collective_err(ring.all_reduce(&mut buf, ReduceOp::Sum))
    });
    let (op, seq, rank, peer, msg) = &results[0];
    assert_eq!((*op, *seq, *rank, *peer), ("all_reduce", 1, 0, Some(1)));
    assert_eq!(
        msg,
        "rank 1 is at all_reduce #1 (sum, 11 elements) but this rank is at all_reduce #1 (sum, 10 \
         elements); every rank must issue the same collectives in the same order with the same lengths"
    );
}

#[test]
fn silent_peer_times_out_naming_it() {
    let (tx, rx) = mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    let t0 = Instant::now();
    let results = with_ring(2, Duration::from_secs(1), |rank, ring| {
        if rank == 1 {
            // Stays connected but never joins the op, until rank 0 gave up.
            let _ = rx.lock().unwrap().recv_timeout(T);
            return None;
        }
        let mut buf = vec![1.0; 1000];
        let r = collective_err(ring.all_reduce(&mut buf, ReduceOp::Sum));
        tx.send(()).unwrap();
        Some((r, t0.elapsed()))
    });
    let ((op, seq, rank, peer, msg), elapsed) = results[0].clone().unwrap();
    assert_eq!((op, seq, rank, peer), ("all_reduce", 1, 0, Some(1)));
    assert_eq!(msg, "no progress from rank 1 for 1 s (ddp.timeout_s)");
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
}

#[test]
fn dead_peer_is_reported_long_before_the_timeout() {
    let sync = Barrier::new(3);
    let results = with_ring(3, Duration::from_secs(30), |rank, ring| {
        let mut buf = data(rank, 3_000_000);
        ring.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
        sync.wait();
        if rank == 2 {
            // Dies while the others are blocked in their second op (rank 0 waits for its
            // data, rank 1 for it to read): returning drops the ring and its sockets.
            std::thread::sleep(Duration::from_millis(300));
            return None;
        }
        let t0 = Instant::now();
        let err = collective_err(ring.all_reduce(&mut buf, ReduceOp::Sum));
        // Later ops fail at once too.
        let (_, _, _, _, again) = collective_err(ring.barrier());
        assert!(
            again.starts_with("the ring is unusable after an earlier failure"),
            "{again}"
        );
        Some((err, t0.elapsed()))
    });
    // rank 2 returned from the closure, which dropped its ring inside with_ring.
    let ((op, seq, rank, peer, msg), elapsed) = results[0].clone().unwrap();
    assert_eq!((op, seq, rank, peer), ("all_reduce", 2, 0, Some(2)));
    assert_eq!(
        msg,
        "connection closed by rank 2 (it exited or crashed; see its log)"
    );
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    let ((_, _, rank, peer, _), elapsed) = results[1].clone().unwrap();
    assert_eq!(rank, 1);
    // Rank 1 sends to rank 2 and receives from rank 0, which fails first and shuts down.
    assert!(peer == Some(2) || peer == Some(0), "{peer:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[test]
fn ring_links_use_the_token() {
    let results = with_ring_token(3, T, Some("s3cret"), |rank, ring| {
        let ring = ring.unwrap();
        let mut buf = data(rank, 10);
        ring.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
        buf
    });
    let expected = sum_of(3, 10);
    assert!(results.iter().all(|b| *b == expected));
}

#[test]
fn strangers_on_the_ring_port_are_refused_and_ignored() {
    // The accepting side of rank 1 in a world of 2, with two strangers knocking first.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cancel = AtomicBool::new(false);
    let deadline = Instant::now() + T;
    std::thread::scope(|s| {
        let acceptor = s.spawn(|| accept_prev(listener, 1, 2, 0, Some("tok"), deadline, &cancel));
        let knock = |rank, token| {
            let mut stream = TcpStream::connect(addr).unwrap();
            handshake::hello(&mut stream, rank, 2, token, RING_PURPOSE).unwrap()
        };
        assert_eq!(knock(0, Some("wrong")), Err(Refusal::BadToken));
        assert_eq!(knock(0, None), Err(Refusal::BadToken));
        assert_eq!(
            knock(1, Some("tok")),
            Err(Refusal::UnexpectedRank { expected: 0 })
        );
        assert_eq!(knock(0, Some("tok")), Ok(()));
        assert!(acceptor.join().unwrap().is_ok());
    });
}

#[test]
fn predecessor_that_never_connects_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let cancel = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_millis(300);
    let err = accept_prev(listener, 1, 3, 0, None, deadline, &cancel).unwrap_err();
    assert!(
        err.starts_with("rank 0 did not connect to this rank's ring port 127.0.0.1:"),
        "{err}"
    );
}
