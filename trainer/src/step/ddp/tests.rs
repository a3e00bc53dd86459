//! Tests of the DDP step: flat buffers, micro-batches, and the sharded step against an
//! all-reduce and a whole optimizer step, over the TCP ring and in shared buffers.

use super::*;
use crate::models::BnMode;
use crate::optim::{self, OptimizerConfig, matrix_ranges};
use crate::spec::ModelName;
use candle_core::Device;
use std::sync::Mutex;

/// A world of one: every collective is the identity.
pub(crate) fn solo() -> SharedCollective {
    let one = crate::dist::ring::TcpRing::single(std::time::Duration::from_secs(5));
    Arc::new(Mutex::new(Box::new(one)))
}

#[test]
fn flat_params_round_trip_and_buckets_cover_everything() {
    let net = Network::new(
        ModelName::Mlp,
        [1, 28, 28],
        10,
        &Device::Cpu,
        BnMode::Local,
        3,
    )
    .unwrap();
    let mut ddp = Ddp::new(&net, solo(), 1 << 20, true).unwrap();
    assert_eq!(
        ddp.num_params(),
        784 * 512 + 512 + 512 * 512 + 512 + 5120 + 10
    );
    let covered: usize = ddp.shards.buckets.iter().map(|b| b.len()).sum();
    assert_eq!(covered, ddp.num_params() + 1);
    assert!(ddp.shards.buckets.len() >= 3);
    ddp.params_mut().iter_mut().for_each(|p| *p = 0.5);
    ddp.write_params(&net).unwrap();
    let w: Vec<f32> = net.params[0].1.flatten_all().unwrap().to_vec1().unwrap();
    assert!(w.iter().all(|v| *v == 0.5));
    assert_eq!(ddp.param_at(0), Some("linear_relu_stack.0.bias"));
}

/// Plain SGD over the 11 parameters of [`linear`].
pub(crate) fn sgd() -> Optimizer {
    Optimizer::new(
        crate::optim::OptimizerConfig::Sgd {
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        },
        11,
    )
}

pub(crate) fn linear() -> Network {
    Network::new(
        ModelName::Linear,
        [1, 1, 10],
        1,
        &Device::Cpu,
        BnMode::Local,
        3,
    )
    .unwrap()
}

/// The gradients of the summed outputs for a batch of 4 inputs all equal to `x`.
fn grads_at(net: &Network, x: f32) -> GradStore {
    let x = (Tensor::ones((4, 1, 1, 10), candle_core::DType::F32, &Device::Cpu).unwrap()
        * x as f64)
        .unwrap();
    let loss = net.forward(&x, true).unwrap().sum_all().unwrap();
    loss.backward().unwrap()
}

#[test]
fn accumulate_adds_micro_batches_and_the_step_reports_stop() {
    let net = linear();
    let mut ddp = Ddp::new(&net, solo(), 25 << 20, true).unwrap();
    let mut opt = sgd();
    let g = grads_at(&net, 1.0);
    ddp.accumulate(&net, &g, 0.5).unwrap();
    ddp.accumulate(&net, &g, 0.5).unwrap();
    ddp.params_mut().fill(0.0);
    assert!(!ddp.sync_and_step(&mut opt, 1.0, false).unwrap().stop);
    // d(sum of 4 outputs)/d bias = 4 and /d w_i = 4 (inputs 1); two halves → 4; lr 1.
    assert_eq!(ddp.params(), vec![-4.0; 11]);
    ddp.accumulate(&net, &g, 1.0).unwrap();
    assert!(ddp.sync_and_step(&mut opt, 1.0, true).unwrap().stop);
}

/// Adam with L2 weight decay, as the sharded step's tests run it.
pub(crate) const ADAM: OptimizerConfig = OptimizerConfig::Adam {
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.01,
};

/// SGD with momentum: clipping shows in its steps (Adam's are nearly invariant to a scale).
pub(crate) const MOMENTUM: OptimizerConfig = OptimizerConfig::Sgd {
    momentum: 0.9,
    nesterov: false,
    weight_decay: 0.01,
};

/// Three steps of a world of 3 over `comm`, each checked against an all-reduce of every
/// bucket and a whole optimizer step; `buckets` is how many the step should use. With `clip`,
/// the whole step's gradients are clipped first (the norm from each rank's sum of squares over
/// its shard, as the sharded step adds them up).
fn sharded_step_equals_a_whole_step(
    rank: usize,
    comm: SharedCollective,
    buckets: usize,
    config: OptimizerConfig,
    clip: Option<f64>,
) -> (Vec<f32>, Vec<bool>) {
    let net = linear();
    // Buckets of 3 floats where private: 11 parameters and the control element in 4
    // buckets, so every rank owns shards in several buckets and some shards are empty.
    let mut ddp = Ddp::new(&net, comm.clone(), 12, true).unwrap();
    assert_eq!(ddp.shards.buckets.len(), buckets);
    assert_eq!(ddp.private_because().is_none(), buckets == 1);
    let mut opt = Optimizer::new(config, 11);
    opt.grad_clip = clip;
    let mut whole = Optimizer::new(config, 11);
    let mut expected = ddp.params().to_vec();
    let mut stops = Vec::new();
    for step in 0..3 {
        let g = grads_at(&net, 0.37 * (rank + 1) as f32 + step as f32);
        // Two halves at step 1 (micro-batches: the first one's held gradients are copied
        // in when the second comes), the same sum exactly.
        let parts = if step == 1 { 2 } else { 1 };
        for _ in 0..parts {
            ddp.accumulate(&net, &g, 1.0 / parts as f32).unwrap();
        }
        // What the step did before it was sharded: an all-reduce of every bucket (of the
        // gradients as they come, not of the buffer: in shared buffers this rank's shard
        // stays in the gradient tensors).
        let mut avg = [0.0; 12];
        for (slot, (_, var)) in ddp.slots.iter().zip(&net.params) {
            let grad = g.get(var.as_tensor()).unwrap();
            read_tensor(grad, &mut avg[slot.range.clone()], false).unwrap();
        }
        with_comm(&comm, |c| {
            for b in &ddp.shards.buckets {
                c.all_reduce(&mut avg[b.clone()], ReduceOp::Avg)?;
            }
            Ok(())
        })
        .unwrap();
        let norm = clip.map(|max| {
            // The norm as the sharded step adds it up: each rank's sum of squares over its
            // shards, all-reduced.
            let mine = ddp
                .shards
                .own
                .iter()
                .map(|r| optim::sum_of_squares(&avg[r.clone()]));
            let norm = with_comm(&comm, |c| global_norm(c, mine.sum())).unwrap();
            let exact = optim::sum_of_squares(&avg[..11]).sqrt();
            assert!((norm - exact).abs() < 1e-6 * exact, "{norm} vs {exact}");
            assert!(norm > 2.0 * max, "step {step}: nothing to clip ({norm})");
            optim::scale(&mut avg[..11], optim::clip_coef(norm, max).unwrap());
            norm
        });
        whole.step(&mut expected, &avg[..11], 0.01);
        stops.push(
            ddp.sync_and_step(&mut opt, 0.01, rank == 2 && step == 1)
                .unwrap()
                .stop,
        );
        assert_eq!(ddp.grad_norm(), norm);
        // The model first: in shared buffers it reads the shards from the ranks that
        // updated them; ddp.params() then gathers them into this rank's buffer.
        ddp.write_params(&net).unwrap();
        let mut in_model = vec![0.0; 11];
        for (slot, (_, var)) in ddp.slots.iter().zip(&net.params) {
            read_tensor(var.as_tensor(), &mut in_model[slot.range.clone()], false).unwrap();
        }
        assert!(in_model == expected, "rank {rank}, step {step}: model");
        assert!(ddp.params() == expected, "rank {rank}, step {step}");
    }
    assert!(
        opt.slots != whole.slots,
        "rank {rank}: no stale shard to gather"
    );
    ddp.gather_optimizer_state(&mut opt).unwrap();
    assert!(
        opt.slots == whole.slots,
        "rank {rank}: gathered state differs"
    );
    assert_eq!(opt.steps, 3);
    (ddp.params().to_vec(), stops)
}

fn same_params_and_stops_everywhere(results: &[(Vec<f32>, Vec<bool>)]) {
    for (params, stops) in results {
        assert!(*params == results[0].0);
        assert_eq!(*stops, vec![false, true, false]);
    }
}

/// `f` on every rank of a world of `w` over the TCP ring (private buffers).
pub(crate) fn on_ring<R: Send>(
    w: usize,
    f: impl Fn(usize, SharedCollective) -> R + Sync,
) -> Vec<R> {
    use crate::dist::ring::TcpRing;
    use crate::dist::ring::tests::with_ring;
    let t = std::time::Duration::from_secs(10);
    with_ring(w, t, |rank, ring| {
        let ring = std::mem::replace(ring, TcpRing::single(t));
        f(rank, Arc::new(Mutex::new(Box::new(ring))))
    })
}

/// `f` on every rank of a world of `w` in shared memory (shared buffers).
fn in_shared_memory<R: Send>(w: usize, f: impl Fn(usize, SharedCollective) -> R + Sync) -> Vec<R> {
    crate::dist::shm::tests::with_shared_memory_group(w, |rank, group| {
        f(rank, Arc::new(Mutex::new(Box::new(group))))
    })
}

#[test]
fn the_sharded_step_equals_an_all_reduce_and_a_whole_step_bit_for_bit() {
    let results = on_ring(3, |rank, comm| {
        sharded_step_equals_a_whole_step(rank, comm, 4, ADAM, None)
    });
    same_params_and_stops_everywhere(&results);
}

#[test]
fn the_step_in_shared_buffers_equals_an_all_reduce_and_a_whole_step_bit_for_bit() {
    let results = in_shared_memory(3, |rank, comm| {
        sharded_step_equals_a_whole_step(rank, comm, 1, ADAM, None)
    });
    same_params_and_stops_everywhere(&results);
}

#[test]
fn the_clipped_sharded_step_equals_a_clipped_whole_step_bit_for_bit() {
    let results = on_ring(3, |rank, comm| {
        sharded_step_equals_a_whole_step(rank, comm, 4, MOMENTUM, Some(1.0))
    });
    same_params_and_stops_everywhere(&results);
}

#[test]
fn the_clipped_step_in_shared_buffers_equals_a_clipped_whole_step_bit_for_bit() {
    let results = in_shared_memory(3, |rank, comm| {
        sharded_step_equals_a_whole_step(rank, comm, 1, MOMENTUM, Some(1.0))
    });
    same_params_and_stops_everywhere(&results);
}

/// The mean squared error of the linear model on `rows` of a batch of 4 (row `i` of step `k`:
/// inputs and target from a fixed pattern), and its gradients.
pub(crate) fn mse_grads(net: &Network, k: usize, rows: Range<usize>) -> GradStore {
    let n = rows.len();
    let x: Vec<f32> = rows
        .clone()
        .flat_map(|i| (0..10).map(move |j| ((i * 10 + j + 3 * k) % 7) as f32 * 0.5 - 1.0))
        .collect();
    let y: Vec<f32> = rows.map(|i| 2.0 + (i + k) as f32).collect();
    let x = Tensor::from_vec(x, (n, 1, 1, 10), &Device::Cpu).unwrap();
    let y = Tensor::from_vec(y, (n, 1), &Device::Cpu).unwrap();
    let out = net.forward(&x, true).unwrap();
    let loss = (out - y).unwrap().sqr().unwrap().mean_all().unwrap();
    loss.backward().unwrap()
}

/// 2 replicas × 2 rows ≡ 1 replica × 4 rows, with clipping (to 0.5, below every step's norm):
/// rank `rank` of 2 over `comm` trains on its half of each batch while a world of one trains
/// on the whole batch beside it; both end with the same parameters and saw the same norms.
fn two_halves_clipped_equal_the_whole_batch(
    rank: usize,
    comm: SharedCollective,
    config: OptimizerConfig,
    shared: bool,
) -> Vec<f32> {
    let (net, whole_net) = (linear(), linear());
    let mut ddp = Ddp::new(&net, comm, 12, true).unwrap();
    assert_eq!(ddp.private_because().is_none(), shared);
    let mut whole = Ddp::new(&whole_net, solo(), 12, true).unwrap();
    let start = whole.params().to_vec();
    let shapes: Vec<&[usize]> = net.params.iter().map(|(_, v)| v.dims()).collect();
    let optimizer = || {
        let mut opt = Optimizer::new(config, 11).decaying_only(matrix_ranges(shapes.clone()));
        opt.grad_clip = Some(0.5);
        opt
    };
    let (mut opt, mut whole_opt) = (optimizer(), optimizer());
    for k in 0..4 {
        ddp.accumulate(&net, &mse_grads(&net, k, 2 * rank..2 * rank + 2), 1.0)
            .unwrap();
        whole
            .accumulate(&whole_net, &mse_grads(&whole_net, k, 0..4), 1.0)
            .unwrap();
        assert!(!ddp.sync_and_step(&mut opt, 0.05, false).unwrap().stop);
        assert!(
            !whole
                .sync_and_step(&mut whole_opt, 0.05, false)
                .unwrap()
                .stop
        );
        ddp.write_params(&net).unwrap();
        whole.write_params(&whole_net).unwrap();
        let (norm, want) = (ddp.grad_norm().unwrap(), whole.grad_norm().unwrap());
        assert!(
            (norm - want).abs() < 1e-6 * want,
            "step {k}: {norm} vs {want}"
        );
        assert!(norm > 1.0, "step {k}: nothing to clip ({norm})");
    }
    let (ours, want) = (ddp.params().to_vec(), whole.params().to_vec());
    let worst = ours
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-6, "{config:?}: 2×2 and 1×4 differ by {worst}");
    let moved = want
        .iter()
        .zip(&start)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(moved > 1e-2, "{config:?}: nothing moved ({moved})");
    ours
}

/// AdamW (matrices decayed only) as the GPT recipe runs it.
const ADAMW: OptimizerConfig = OptimizerConfig::AdamW {
    beta1: 0.9,
    beta2: 0.99,
    eps: 1e-8,
    weight_decay: 0.1,
};

#[test]
fn clipped_replicas_equal_one_replica_over_the_ring() {
    for config in [MOMENTUM, ADAMW] {
        let results = on_ring(2, |rank, comm| {
            two_halves_clipped_equal_the_whole_batch(rank, comm, config, false)
        });
        assert!(results[0] == results[1]);
    }
}

#[test]
fn clipped_replicas_equal_one_replica_in_shared_buffers() {
    for config in [MOMENTUM, ADAMW] {
        let results = in_shared_memory(2, |rank, comm| {
            two_halves_clipped_equal_the_whole_batch(rank, comm, config, true)
        });
        assert!(results[0] == results[1]);
    }
}

/// Which of the host step's strategies a test runs.
#[derive(Clone, Copy, Debug)]
enum Run {
    Sharded,
    Shared,
    Overlapped,
}

/// fp16's loss scaling on rank `rank` of 2 over `comm` in the strategy `run`: each step's
/// gradients come scaled by the loss scale, as backward gives them, and rank 1's second step
/// brings an infinity (its gradients times inf: inf and NaN). Every step is checked against an
/// all-reduce of the unscaled gradients and a whole optimizer step (bit for bit: a world of 2
/// adds two values, and scaling by a power of 2 is exact); the skipped step leaves parameters,
/// the optimizer's state and its step count as they were. Returns what each rank ends with.
fn loss_scaled_step(
    rank: usize,
    comm: SharedCollective,
    run: Run,
) -> (Vec<f32>, u64, crate::scaler::LossScaler) {
    use crate::scaler::LossScaler;
    use crate::step::comm::Route;
    use crate::step::hook::Wire;
    let net = linear();
    let mut ddp = Ddp::new(&net, comm.clone(), 12, true).unwrap();
    if let Run::Overlapped = run {
        assert!(
            ddp.overlap_buckets(&net, Route::new(), 12, Wire::F32)
                .unwrap()
        );
    }
    assert_eq!(ddp.private_because().is_none(), matches!(run, Run::Shared));
    let mut opt = Optimizer::new(ADAM, 11);
    opt.scaler = Some(LossScaler::new(1024.0, 2));
    let mut whole = Optimizer::new(ADAM, 11);
    let mut expected = ddp.params().to_vec();
    for step in 0..4 {
        let scale = opt.scaler.unwrap().scale;
        let g = grads_at(&net, 0.37 * (rank + 1) as f32 + step as f32);
        let poisoned = rank == 1 && step == 1;
        let factor = if poisoned { f32::INFINITY } else { scale };
        ddp.accumulate(&net, &g, factor).unwrap();
        let mut avg = [0.0; 11];
        for (slot, (_, var)) in ddp.slots.iter().zip(&net.params) {
            let grad = g.get(var.as_tensor()).unwrap();
            read_tensor(grad, &mut avg[slot.range.clone()], false).unwrap();
        }
        with_comm(&comm, |c| c.all_reduce(&mut avg, ReduceOp::Avg)).unwrap();
        let slots_before = whole.slots.clone();
        if step != 1 {
            whole.step(&mut expected, &avg, 0.01);
        }
        ddp.sync_and_step(&mut opt, 0.01, false).unwrap();
        ddp.write_params(&net).unwrap();
        assert!(ddp.params() == expected, "{run:?} rank {rank} step {step}");
        let s = opt.scaler.unwrap();
        match step {
            1 => {
                assert_eq!((s.scale, s.skipped), (512.0, 1), "{run:?} rank {rank}");
                assert_eq!(whole.slots, slots_before);
            }
            // Two finite steps after the skip: the scale doubles back.
            3 => assert_eq!((s.scale, s.finite_run), (1024.0, 0)),
            _ => assert_eq!(s.skipped, u64::from(step > 1)),
        }
    }
    ddp.gather_optimizer_state(&mut opt).unwrap();
    assert!(
        opt.slots == whole.slots,
        "{run:?} rank {rank}: optimizer state"
    );
    assert_eq!(
        (opt.steps, whole.steps),
        (3, 3),
        "the skipped step is not counted"
    );
    (ddp.params().to_vec(), opt.steps, opt.scaler.unwrap())
}

#[test]
fn an_infinity_on_one_rank_skips_the_step_on_every_rank_in_every_strategy() {
    for run in [Run::Sharded, Run::Overlapped] {
        let results = on_ring(2, |rank, comm| loss_scaled_step(rank, comm, run));
        assert!(results[0] == results[1], "{run:?}");
    }
    let results = in_shared_memory(2, |rank, comm| loss_scaled_step(rank, comm, Run::Shared));
    assert!(results[0] == results[1]);
}
