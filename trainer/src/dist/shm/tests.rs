use std::ops::Range;

use super::*;
use crate::dist::Collective;
use crate::dist::group::ProcessGroup;
use crate::dist::ring::tests::{check_shards, collective_err, data, rough_data, sum_of, with_ring};

const T: Duration = Duration::from_secs(5);

/// How a test's ranks move the data.
#[derive(Clone, Copy, Debug)]
enum Copies {
    Direct,
    /// Staged through slots of this many floats.
    Staged(usize),
    /// Direct from this many floats on, staged (slots of 16 floats) below.
    Mixed(usize),
}

/// Both ways, with slots of `slot` floats for the staged one.
fn both(slot: usize) -> [Copies; 2] {
    [Copies::Direct, Copies::Staged(slot)]
}

fn setup(copies: Copies) -> Setup {
    let (direct, slot_floats, direct_min_floats) = match copies {
        // Every op but the empty one uses direct copies.
        Copies::Direct => (true, 64, 1),
        Copies::Staged(slot) => (false, slot, 1),
        Copies::Mixed(min) => (true, 16, min),
    };
    Setup {
        host: "host".into(),
        slot_floats,
        direct,
        direct_min_floats,
        // Mixed ops also wait the long way (every rank on its own core).
        spin: match copies {
            Copies::Mixed(_) => SPIN_OWN_CORES,
            _ => SPIN,
        },
    }
}

/// Sets up shared memory on every rank of a fresh ring and runs `f`.
fn with_shm<R: Send>(
    w: usize,
    copies: Copies,
    timeout: Duration,
    f: impl Fn(usize, &mut TcpRing, &mut ShmReducer) -> R + Sync,
) -> Vec<R> {
    with_ring(w, T, |rank, ring| {
        let mut shm = ShmReducer::establish_with(ring, rank, w, timeout, &setup(copies))
            .unwrap()
            .expect("shared memory set up");
        match copies {
            Copies::Direct | Copies::Mixed(_) => assert_eq!(shm.staged_because(), None),
            Copies::Staged(_) => {
                assert!(shm.staged_because().unwrap().contains("DDP_SHM_DIRECT=0"))
            }
        }
        f(rank, ring, &mut shm)
    })
}

/// Runs one all-reduce the way the process group does.
fn reduce(ring: &mut TcpRing, shm: &mut ShmReducer, buf: &mut [f32], op: ReduceOp) -> Result<()> {
    shm.all_reduce(ring, buf, op)
}

/// Sets up shared memory on every rank of a fresh ring and runs `f` with the process group
/// made of both.
fn with_group<R: Send>(
    w: usize,
    copies: Copies,
    f: impl Fn(usize, &mut ProcessGroup) -> R + Sync,
) -> Vec<R> {
    group_with(w, copies, |rank, mut group| f(rank, &mut group))
}

/// [`with_group`], handing over the group.
fn group_with<R: Send>(
    w: usize,
    copies: Copies,
    f: impl Fn(usize, ProcessGroup) -> R + Sync,
) -> Vec<R> {
    with_ring(w, T, |rank, ring| {
        let shm = ShmReducer::establish_with(ring, rank, w, T, &setup(copies))
            .unwrap()
            .expect("shared memory set up");
        let ring = std::mem::replace(ring, TcpRing::single(T));
        f(rank, ProcessGroup::from_parts(ring, shm))
    })
}

/// A process group of `w` ranks (threads of this process) whose all-reduces go through shared
/// memory, for tests of what runs over one.
pub(crate) fn with_shared_memory_group<R: Send>(
    w: usize,
    f: impl Fn(usize, ProcessGroup) -> R + Sync,
) -> Vec<R> {
    group_with(w, Copies::Direct, f)
}

#[test]
fn shards_reduce_and_gather_like_an_all_reduce_in_one_or_many_chunks() {
    // Slots of 64 floats: 1001 floats take several chunks per shard when staged.
    const LENGTHS: [usize; 6] = [0, 1, 5, 64, 1001, 100_003];
    for (w, copies) in (2..=4).flat_map(|w| both(64).map(|c| (w, c))) {
        let results = with_group(w, copies, |_, group| {
            LENGTHS.map(|n| check_shards(group, n))
        });
        for out in &results[1..] {
            assert!(*out == results[0], "{copies:?}, world {w}");
        }
    }
}

#[test]
fn shard_ops_between_all_reduces_with_uneven_ranks_keep_every_chunk() {
    // A DDP step's sequence (reduce-scatter, all-gather) mixed with all-reduces, a different
    // rank late each time: no slot may be overwritten while another rank still reads it.
    for copies in [Copies::Direct, Copies::Staged(16), Copies::Mixed(150)] {
        let results = with_group(3, copies, |rank, group| {
            let mut out = Vec::new();
            for op in 0..30 {
                let n = if op % 2 == 0 { 200 } else { 100 };
                let values =
                    |r: usize| -> Vec<f32> { (0..n).map(|i| (op * 1000 + i + r) as f32).collect() };
                if rank == op % 3 {
                    std::thread::sleep(Duration::from_micros(300));
                }
                let mut buf = values(rank);
                group.reduce_scatter(&mut buf, ReduceOp::Sum).unwrap();
                let mine = group.shard(n, rank);
                let mut gathered = vec![0.0; n];
                gathered[mine.clone()].copy_from_slice(&buf[mine]);
                if rank == (op + 1) % 3 {
                    std::thread::sleep(Duration::from_micros(300));
                }
                group.all_gather_shards(&mut gathered).unwrap();
                out.push(gathered);
                let mut buf = values(rank);
                group.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                out.push(buf);
            }
            out
        });
        for (rank, out) in results.iter().enumerate() {
            for (k, buf) in out.iter().enumerate() {
                let op = k / 2;
                let n = if op % 2 == 0 { 200 } else { 100 };
                let want: Vec<f32> = (0..n).map(|i| (3 * (op * 1000 + i) + 3) as f32).collect();
                assert!(*buf == want, "{copies:?}, rank {rank}, op {op}, result {k}");
            }
        }
    }
}

#[test]
fn ranks_spin_long_only_when_their_threads_have_cores_of_their_own() {
    assert_eq!(spin_for(2, 1, 2), SPIN_OWN_CORES);
    assert_eq!(spin_for(2, 2, 4), SPIN_OWN_CORES);
    assert_eq!(spin_for(2, 2, 2), SPIN);
    assert_eq!(spin_for(4, 1, 2), SPIN);
    assert_eq!(spin_for(3, 0, 4), SPIN_OWN_CORES);
}

#[test]
fn sums_and_averages_any_length_in_one_or_many_chunks() {
    // 100,003: more than one block of direct copies per part.
    const LENGTHS: [usize; 7] = [0, 1, 2, 64, 65, 1001, 100_003];
    for (w, copies) in (2..=4).flat_map(|w| both(64).map(|c| (w, c))) {
        let results = with_shm(w, copies, T, |rank, ring, shm| {
            let mut out = Vec::new();
            for n in LENGTHS {
                let mut buf = data(rank, n);
                reduce(ring, shm, &mut buf, ReduceOp::Sum).unwrap();
                out.push(buf);
                let mut buf = data(rank, n);
                reduce(ring, shm, &mut buf, ReduceOp::Avg).unwrap();
                out.push(buf);
            }
            out
        });
        for (rank, out) in results.iter().enumerate() {
            for (k, n) in LENGTHS.into_iter().enumerate() {
                let sum = sum_of(w, n);
                let avg: Vec<f32> = sum.iter().map(|s| s * (1.0 / w as f32)).collect();
                let case = format!("{copies:?}, world {w}, rank {rank}, length {n}");
                assert!(out[2 * k] == sum, "sum, {case}");
                assert!(out[2 * k + 1] == avg, "avg, {case}");
            }
        }
    }
}

#[test]
fn every_rank_ends_with_the_same_bits_whichever_way_the_data_moves() {
    // Values whose sum depends on the order of addition: all ranks must still agree, and both
    // ways add in rank order.
    let run = |copies| {
        with_shm(3, copies, T, |rank, ring, shm| {
            let mut buf: Vec<f32> = (0..100_000)
                .map(|i| ((i * 7919 + rank * 104_729) % 1000) as f32 * 1e-3 + 1e4 * rank as f32)
                .collect();
            reduce(ring, shm, &mut buf, ReduceOp::Avg).unwrap();
            buf
        })
    };
    let [direct, staged] = both(1 << 10).map(run);
    assert!(direct[0] == direct[1] && direct[0] == direct[2]);
    assert!(staged[0] == staged[1] && staged[0] == staged[2]);
    assert!(direct[0] == staged[0]);
}

#[test]
fn many_ops_in_a_row_with_uneven_ranks_keep_every_chunk() {
    // A slow rank and a fast one: the fast one stages the next chunk (or, directly, publishes its
    // next buffer) while the slow one still reads the last; nothing may be overwritten early.
    // Mixed: ops of 100 floats staged, of 200 direct, in turn.
    for copies in [Copies::Direct, Copies::Staged(16), Copies::Mixed(150)] {
        let results = with_shm(3, copies, T, |rank, ring, shm| {
            let mut out = Vec::new();
            for op in 0..40 {
                let n = if op % 2 == 0 { 200 } else { 100 };
                let mut buf: Vec<f32> = (0..n).map(|i| (op * 1000 + i + rank) as f32).collect();
                if rank == op % 3 {
                    std::thread::sleep(Duration::from_micros(300));
                }
                reduce(ring, shm, &mut buf, ReduceOp::Sum).unwrap();
                out.push(buf);
            }
            out
        });
        for (rank, out) in results.iter().enumerate() {
            for (op, buf) in out.iter().enumerate() {
                let n = if op % 2 == 0 { 200 } else { 100 };
                let want: Vec<f32> = (0..n).map(|i| (3 * (op * 1000 + i) + 3) as f32).collect();
                assert!(*buf == want, "{copies:?}, rank {rank}, op {op}");
            }
        }
    }
}

#[test]
fn a_segment_name_does_not_outlive_the_setup() {
    let pid = std::process::id();
    for copies in both(64) {
        with_shm(2, copies, T, |_, _, _| ());
    }
    let leftovers: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("ddp-{pid}-"))
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn ranks_on_different_hosts_fall_back_to_the_ring() {
    let results = with_ring(2, T, |rank, ring| {
        let setup = Setup {
            host: format!("host-{rank}"),
            ..setup(Copies::Direct)
        };
        ShmReducer::establish_with(ring, rank, 2, T, &setup)
            .unwrap()
            .err()
    });
    for why in results {
        assert_eq!(why.as_deref(), Some("the ranks do not all run on one host"));
    }
}

#[test]
fn different_lengths_are_refused_naming_the_rank() {
    for copies in both(64) {
        let results = with_shm(2, copies, T, |rank, ring, shm| {
            let mut buf = vec![1.0; 10 + rank];
            collective_err(reduce(ring, shm, &mut buf, ReduceOp::Sum))
        });
        let (op, seq, rank, peer, msg) = &results[0];
        assert_eq!((*op, *rank, *peer), ("all_reduce", 0, Some(1)));
        let want = format!("rank 1 is in op #{seq} with 11 elements");
        assert!(msg.contains(&want), "{copies:?}: {msg}");
    }
}

#[test]
fn a_closed_neighbour_ends_the_wait_at_once() {
    for copies in both(64) {
        let results = with_shm(2, copies, T, |rank, ring, shm| {
            let start = Instant::now();
            if rank == 1 {
                // Leaves the group as a crashed process would: its sockets close.
                let _ = ring.finish_external::<()>(Err(Error::Model("gone".into())));
                return None;
            }
            let mut buf = vec![1.0; 100];
            let err = collective_err(reduce(ring, shm, &mut buf, ReduceOp::Sum));
            Some((err, start.elapsed()))
        });
        let ((op, _, rank, peer, msg), elapsed) = results[0].clone().unwrap();
        assert_eq!((op, rank, peer), ("all_reduce", 0, Some(1)));
        assert!(
            msg.contains("connection closed by rank 1"),
            "{copies:?}: {msg}"
        );
        assert!(
            elapsed < Duration::from_secs(2),
            "{copies:?}: took {elapsed:?}"
        );
    }
}

#[test]
fn a_missing_rank_times_out_by_name() {
    let timeout = Duration::from_millis(300);
    for copies in both(64) {
        let results = with_shm(3, copies, timeout, |rank, ring, shm| {
            if rank == 2 {
                // Alive but never joins the op; waits until the others have given up.
                std::thread::sleep(Duration::from_millis(900));
                return None;
            }
            let mut buf = vec![1.0; 100];
            Some(collective_err(reduce(ring, shm, &mut buf, ReduceOp::Sum)))
        });
        for r in [0, 1] {
            let (op, _, rank, peer, msg) = results[r].clone().unwrap();
            assert_eq!((op, rank), ("all_reduce", r));
            // The first rank to time out names rank 2; the other may see its abort instead.
            assert!(
                (peer == Some(2) && msg.contains("timed out") && msg.contains("[2]"))
                    || msg.contains("failed during a shared-memory all-reduce"),
                "{copies:?}, rank {r}: {msg}"
            );
        }
    }
}

/// The reduced blocks of one reduce-scatter, copied into the parameters and kept in order.
fn keep_reduced(reduced: &mut Vec<f32>) -> impl FnMut(Range<usize>, &[f32], &mut [f32]) + '_ {
    reduced.clear();
    move |_, grads, params| {
        params.copy_from_slice(grads);
        reduced.extend_from_slice(grads);
    }
}

/// One DDP-like step in shared step buffers: `values` into the gradients, except for two pieces
/// of this rank's shard that it holds elsewhere (NaN in its buffer), a reduce-scatter whose
/// blocks become the parameters, an all-gather. Returns (the reduced shard, the parameters read
/// from their owners, the parameters gathered into this rank's buffer).
fn step_through_buffers(
    ring: &mut TcpRing,
    shm: &mut ShmReducer,
    step: &mut StepBuffers,
    values: &[f32],
    op: ReduceOp,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    step.grads_mut().copy_from_slice(values);
    let mine = step.shard();
    let (a, b) = (mine.start + mine.len() / 5, mine.start + mine.len() / 2);
    let pieces = [
        a..(a + mine.len() / 4).min(b),
        b..mine.end.saturating_sub(1).max(b),
    ];
    let held: Vec<HeldGrads> = pieces
        .iter()
        .filter(|at| !at.is_empty())
        .map(|at| HeldGrads {
            at: at.clone(),
            values: &values[at.clone()],
        })
        .collect();
    for h in &held {
        step.grads_mut()[h.at.clone()].fill(f32::NAN);
    }
    let mut reduced = Vec::new();
    shm.reduce_scatter_step(ring, step, op, &held, &mut keep_reduced(&mut reduced))?;
    shm.all_gather_step(ring, step)?;
    let mut read = vec![0.0; step.len()];
    step.read_params(0..step.len(), &mut read);
    step.gather_params();
    Ok((reduced, read, step.params().to_vec()))
}

#[test]
fn step_buffers_reduce_and_gather_with_the_bits_of_an_all_reduce() {
    const LENGTHS: [usize; 6] = [0, 1, 5, 64, 1001, 100_003];
    for w in 2..=4 {
        with_shm(w, Copies::Staged(64), T, |rank, ring, shm| {
            for n in LENGTHS {
                let mut step = shm.step_buffers_if(ring, n, true).unwrap().unwrap();
                assert_eq!((step.len(), step.shard()), (n, segment(n, w, rank)));
                for op in [ReduceOp::Sum, ReduceOp::Avg] {
                    let mut whole = rough_data(rank, n);
                    shm.all_reduce(ring, &mut whole, op).unwrap();
                    let (reduced, read, gathered) =
                        step_through_buffers(ring, shm, &mut step, &rough_data(rank, n), op)
                            .unwrap();
                    let case = format!("world {w}, rank {rank}, length {n}, {op:?}");
                    assert!(reduced == whole[step.shard()], "reduced shard, {case}");
                    assert!(read == whole, "read from the owners, {case}");
                    assert!(gathered == whole, "gathered, {case}");
                    // Pieces across shard boundaries read the same.
                    let at = n / 3..n - n / 4;
                    let mut piece = vec![0.0; at.len()];
                    step.read_params(at.clone(), &mut piece);
                    assert!(piece == whole[at], "a piece, {case}");
                }
            }
        });
    }
}

#[test]
fn step_buffers_keep_every_step_with_uneven_ranks() {
    // A different rank late at each point of each step: nobody may read a buffer its owner
    // is already writing for the next step.
    let results = with_shm(3, Copies::Direct, T, |rank, ring, shm| {
        let mut step = shm.step_buffers_if(ring, 200, true).unwrap().unwrap();
        let mut out = Vec::new();
        for k in 0..30 {
            let values: Vec<f32> = (0..200).map(|i| (k * 1000 + i + rank) as f32).collect();
            if rank == k % 3 {
                std::thread::sleep(Duration::from_micros(300));
            }
            step.grads_mut().copy_from_slice(&values);
            let mut reduced = Vec::new();
            shm.reduce_scatter_step(
                ring,
                &mut step,
                ReduceOp::Sum,
                &[],
                &mut keep_reduced(&mut reduced),
            )
            .unwrap();
            if rank == (k + 1) % 3 {
                std::thread::sleep(Duration::from_micros(300));
            }
            shm.all_gather_step(ring, &mut step).unwrap();
            if rank == (k + 2) % 3 {
                std::thread::sleep(Duration::from_micros(300));
            }
            let mut read = vec![0.0; 200];
            step.read_params(0..200, &mut read);
            out.push((k, read));
            // Every other step, an all-reduce before the next, as evaluation or SyncBatchNorm
            // would; else the next step's barrier alone keeps the parameters until all read.
            if k % 2 == 1 {
                let mut buf = values.clone();
                shm.all_reduce(ring, &mut buf, ReduceOp::Sum).unwrap();
                out.push((k, buf));
            }
        }
        out
    });
    for (rank, out) in results.iter().enumerate() {
        assert_eq!(out.len(), 45);
        for (j, (k, buf)) in out.iter().enumerate() {
            let want: Vec<f32> = (0..200).map(|i| (3 * (k * 1000 + i) + 3) as f32).collect();
            assert!(*buf == want, "rank {rank}, step {k}, result {j}");
        }
    }
}

/// (The segment is made and its name removed as the all-reduces' is, which
/// `a_segment_name_does_not_outlive_the_setup` checks.)
#[test]
fn step_buffers_are_refused_when_one_rank_opts_out() {
    let results = with_shm(3, Copies::Direct, T, |rank, ring, shm| {
        let refused = shm.step_buffers_if(ring, 10, rank != 2).unwrap().err();
        let accepted = shm.step_buffers_if(ring, 10, true).unwrap().is_ok();
        (refused, accepted)
    });
    for (refused, accepted) in results {
        assert_eq!(refused.as_deref(), Some("rank 2 has DDP_SHM_STEP=0"));
        assert!(accepted);
    }
}

#[test]
fn a_step_with_a_closed_neighbour_fails_at_once_naming_it() {
    let results = with_shm(2, Copies::Direct, T, |rank, ring, shm| {
        let mut step = shm.step_buffers_if(ring, 100, true).unwrap().unwrap();
        let start = Instant::now();
        if rank == 1 {
            let _ = ring.finish_external::<()>(Err(Error::Model("gone".into())));
            return None;
        }
        let err = collective_err(shm.reduce_scatter_step(
            ring,
            &mut step,
            ReduceOp::Avg,
            &[],
            &mut |_, _, _| {},
        ));
        Some((err, start.elapsed()))
    });
    let ((op, _, rank, peer, msg), elapsed) = results[0].clone().unwrap();
    assert_eq!((op, rank, peer), ("reduce_scatter", 0, Some(1)));
    assert!(msg.contains("connection closed by rank 1"), "{msg}");
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
}
