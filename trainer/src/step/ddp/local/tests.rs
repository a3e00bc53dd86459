//! The local steps against what they must equal: averaging every step with plain SGD is DDP,
//! DiLoCo with outer learning rate 1 and no momentum is averaging, streaming with one fragment,
//! no delay and no mixing is DiLoCo (these two bit for bit); a checkpoint's state taken with a
//! sync in flight goes on to the uninterrupted run's weights; every encoding's average is the
//! same bits on every rank and within its bound of the true average.

use std::ops::Range;

use super::exchange::{exchange, payload};
use crate::dist::quant::{BLOCK, Bits};
use crate::optim::Optimizer;
use crate::spec::{LocalSync, SyncEncoding, SyncMethod};
use crate::step::comm::{SharedCollective, with_comm};
use crate::step::ddp::Ddp;
use crate::step::ddp::tests::{ADAM, linear, mse_grads, on_ring, sgd, solo};

fn sync(method: SyncMethod, every: u64) -> LocalSync {
    LocalSync {
        method,
        every,
        warmup_steps: 0,
        outer_lr: 1.0,
        outer_momentum: 0.0,
        fragments: 1,
        delay: 0,
        mixing: 0.0,
        encoding: SyncEncoding::F32,
        error_feedback: false,
    }
}

/// DiLoCo's outer optimizer.
fn diloco(every: u64) -> LocalSync {
    LocalSync {
        outer_lr: 0.7,
        outer_momentum: 0.9,
        ..sync(SyncMethod::Diloco, every)
    }
}

fn adam() -> Optimizer {
    Optimizer::new(ADAM, 11)
}

/// Rank `rank` of 2 over `comm` takes `steps` steps of `s` on its half of each batch of 4,
/// from step `from` (its Ddp `ddp`, or a fresh one); returns the Ddp (to go on) and the
/// model's weights after each step.
fn train(
    rank: usize,
    ddp: &mut Ddp,
    opt: &mut Optimizer,
    net: &crate::models::Network,
    steps: Range<usize>,
) -> Vec<Vec<f32>> {
    steps
        .map(|k| {
            ddp.begin_step().unwrap();
            ddp.accumulate(net, &mse_grads(net, k, 2 * rank..2 * rank + 2), 1.0)
                .unwrap();
            assert!(!ddp.sync_and_step(opt, 0.05, false).unwrap().stop);
            ddp.write_params(net).unwrap();
            ddp.params().to_vec()
        })
        .collect()
}

/// The local weights after each step and the global weights at the end, of rank `rank` of 2
/// training with `s` and a fresh optimizer from `make`.
fn run(
    rank: usize,
    comm: &SharedCollective,
    s: LocalSync,
    make: fn() -> Optimizer,
    steps: usize,
) -> (Vec<Vec<f32>>, Vec<f32>) {
    let (trace, state) = run_to_state(rank, comm, s, make, steps);
    (trace, state.global)
}

/// [`run`], with the local steps' whole state at the end.
fn run_to_state(
    rank: usize,
    comm: &SharedCollective,
    s: LocalSync,
    make: fn() -> Optimizer,
    steps: usize,
) -> (Vec<Vec<f32>>, super::LocalState) {
    let net = linear();
    let mut ddp = Ddp::new(&net, comm.clone(), 1 << 20, false).unwrap();
    assert!(ddp.local_steps(s).unwrap());
    let mut opt = make();
    let trace = train(rank, &mut ddp, &mut opt, &net, 0..steps);
    (trace, ddp.export_local().unwrap().unwrap())
}

#[test]
fn averaging_every_step_with_plain_sgd_equals_ddp() {
    let results = on_ring(2, |rank, comm| {
        run(rank, &comm, sync(SyncMethod::Average, 1), sgd, 5)
    });
    // One replica on the whole batch of 4: DDP's result for 2 x 2 (proven equal elsewhere).
    let net = linear();
    let mut whole = Ddp::new(&net, solo(), 1 << 20, true).unwrap();
    let mut opt = sgd();
    let mut want = Vec::new();
    for k in 0..5 {
        whole
            .accumulate(&net, &mse_grads(&net, k, 0..4), 1.0)
            .unwrap();
        whole.sync_and_step(&mut opt, 0.05, false).unwrap();
        whole.write_params(&net).unwrap();
        want.push(whole.params().to_vec());
    }
    for (trace, global) in &results {
        for (k, (ours, theirs)) in trace.iter().zip(&want).enumerate() {
            let worst = ours
                .iter()
                .zip(theirs)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-6, "step {k}: averaged weights {worst} off DDP's");
        }
        assert!(
            *global == trace[4],
            "after a sync the replica is at the global weights"
        );
    }
    assert!(
        results[0] == results[1],
        "every replica ends with the same bits"
    );
}

#[test]
fn diloco_with_outer_lr_1_and_no_momentum_is_model_averaging_bit_for_bit() {
    let results = on_ring(2, |rank, comm| {
        let avg = run(rank, &comm, sync(SyncMethod::Average, 3), adam, 7);
        let plain = LocalSync {
            outer_lr: 1.0,
            outer_momentum: 0.0,
            ..diloco(3)
        };
        let dil = run(rank, &comm, plain, adam, 7);
        (avg, dil)
    });
    for (avg, dil) in &results {
        assert!(avg == dil);
    }
    let ((a0, g0), (a1, g1)) = (&results[0].0, &results[1].0);
    // Between syncs the replicas part; at a sync (steps 3 and 6) they meet at the average.
    assert!(a0[3] != a1[3] && a0[5] == a1[5] && g0 == g1);
    let mid: Vec<f32> = a0[4]
        .iter()
        .zip(&a1[4])
        .map(|(x, y)| (x + y) / 2.0)
        .collect();
    assert!(mid != a0[5], "step 6 is a local step, then the sync");
    let _ = g1;
}

#[test]
fn streaming_with_one_fragment_no_delay_and_no_mixing_is_diloco_bit_for_bit() {
    let results = on_ring(2, |rank, comm| {
        let dil = run(rank, &comm, diloco(3), adam, 8);
        let streaming = LocalSync {
            method: SyncMethod::Streaming,
            ..diloco(3)
        };
        let st = run(rank, &comm, streaming, adam, 8);
        (dil, st)
    });
    for (dil, st) in &results {
        assert!(dil == st);
    }
    // The outer step with momentum lands elsewhere than the average.
    assert!(results[0].0.1 != results[0].0.0[2]);
}

#[test]
fn a_checkpoint_with_a_fragment_in_flight_goes_on_to_the_uninterrupted_weights() {
    let s = LocalSync {
        method: SyncMethod::Streaming,
        fragments: 2,
        delay: 2,
        mixing: 0.5,
        encoding: SyncEncoding::Int4,
        error_feedback: true,
        warmup_steps: 1,
        ..diloco(6)
    };
    let results = on_ring(2, |rank, comm| {
        let (whole, end) = run_to_state(rank, &comm, s, adam, 16);
        // Fragment 0 (the bias) begins after steps 4, 10, 16; fragment 1 (the weights, whose
        // encoding loses something) after steps 7 and 13, landing 2 steps later: stop at 8.
        let net = linear();
        let mut ddp = Ddp::new(&net, comm.clone(), 1 << 20, false).unwrap();
        ddp.local_steps(s).unwrap();
        let mut opt = adam();
        let first = train(rank, &mut ddp, &mut opt, &net, 0..8);
        let state = ddp.export_local().unwrap().unwrap();
        assert!(state.landing.is_some(), "a sync is in flight at step 8");
        assert!(state.residual.iter().any(|e| *e != 0.0));
        let slots = opt.slots.clone();
        let steps = opt.steps;
        let net = linear();
        let mut again = Ddp::new(&net, comm.clone(), 1 << 20, false).unwrap();
        again.local_steps(s).unwrap();
        let mut opt = adam();
        opt.restore(steps, slots, std::path::Path::new("t"))
            .unwrap();
        again.import_local(&net, state).unwrap();
        let rest = train(rank, &mut again, &mut opt, &net, 8..16);
        let resumed: Vec<Vec<f32>> = first.into_iter().chain(rest).collect();
        let figures = again.local().unwrap().figures().clone();
        (
            whole,
            end,
            resumed,
            again.export_local().unwrap().unwrap(),
            figures,
        )
    });
    for (whole, end, resumed, resumed_end, _) in &results {
        assert!(
            whole == resumed,
            "resumed weights differ from the uninterrupted run's"
        );
        // The global weights, the momentum and what the encoding lost, too.
        assert!(end == resumed_end);
    }
    let (a, b) = (&results[0].1, &results[1].1);
    assert!(
        a.global == b.global && a.momentum == b.momentum,
        "the same bits everywhere"
    );
    assert!(
        results[0].0[15] != results[1].0[15],
        "mixing keeps each replica's own part"
    );
    let f = &results[0].4;
    assert_eq!(
        f.last_sync, 15,
        "fragment 1 lands after step 15 (begun after 13)"
    );
    assert_eq!(f.drift.len(), 2);
    assert!(f.drift.iter().all(|d| *d > 0.0));
}

/// Values rank `rank` sends: blocks of different magnitudes.
fn values(rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = ((i * 37 + rank * 101) % 200) as f32 / 100.0 - 1.0;
            v * 10f32.powi((rank as i32 + (i / BLOCK) as i32) % 4 - 2)
        })
        .collect()
}

#[test]
fn every_encoding_averages_to_the_same_bits_everywhere_within_its_bound() {
    let n = 1000;
    for encoding in [
        SyncEncoding::F32,
        SyncEncoding::Bf16,
        SyncEncoding::Int8,
        SyncEncoding::Int4,
    ] {
        let results = on_ring(3, |rank, comm| {
            let mine = values(rank, n);
            let mut lost = vec![0.0; n];
            let p = payload(&mine, encoding, Some(&mut lost));
            let (avg, bytes) = with_comm(&comm, |c| exchange(c, p)).unwrap();
            (avg, bytes, lost)
        });
        let truth: Vec<f32> = (0..n)
            .map(|i| (0..3).map(|r| values(r, n)[i]).sum::<f32>() / 3.0)
            .collect();
        for (avg, _, lost) in &results {
            assert!(*avg == results[0].0, "{encoding:?}: ranks differ");
            for i in 0..n {
                // Each rank's error within its block's bound, divided by the world.
                let bound: f32 = (0..3)
                    .map(|r| {
                        let v = values(r, n);
                        let block = &v[i / BLOCK * BLOCK..((i / BLOCK + 1) * BLOCK).min(n)];
                        let absmax = block.iter().fold(0f32, |m, x| m.max(x.abs()));
                        match encoding {
                            SyncEncoding::F32 => absmax * 1e-6,
                            SyncEncoding::Bf16 => absmax / 128.0,
                            SyncEncoding::Int8 => Bits::Eight.bound(absmax) * 1.0001,
                            SyncEncoding::Int4 => Bits::Four.bound(absmax) * 1.0001,
                        }
                    })
                    .sum::<f32>()
                    / 3.0;
                assert!(
                    (avg[i] - truth[i]).abs() <= bound + 1e-7,
                    "{encoding:?} value {i}: {} against {}",
                    avg[i],
                    truth[i]
                );
            }
            assert_eq!(lost.iter().all(|l| *l == 0.0), !encoding.is_lossy());
        }
        let bytes = results[0].1;
        let want = match encoding {
            SyncEncoding::F32 => n as u64 * 4 * 4 / 3,
            SyncEncoding::Bf16 => n as u64 * 2 * 4 / 3,
            SyncEncoding::Int8 => 2 * Bits::Eight.encoded_len(n) as u64,
            SyncEncoding::Int4 => 2 * Bits::Four.encoded_len(n) as u64,
        };
        assert_eq!(bytes, want, "{encoding:?}");
    }
}
