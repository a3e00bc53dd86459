//! The overlapped step against the sharded step it replaces on private buffers, with
//! micro-batches, a batch in parts, clipping, the stop flag and SyncBatchNorm: bit for bit the
//! same weights where the sums cannot differ (2 ranks: `a + b = b + a`), within 1e-6 where the
//! ring adds 3 ranks' gradients in another order (SGD: Adam's first steps turn a gradient that
//! nearly cancels into a full step of either sign), and the same bits on every rank.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use candle_core::{Device, Tensor};

use super::*;
use crate::dist::codec::Codec;
use crate::models::{BnMode, Network};
use crate::optim::{Optimizer, OptimizerConfig};
use crate::spec::ModelName;
use crate::step::comm::{CollectiveStats, Route};
use crate::step::ddp::Ddp;
use crate::step::ddp::tests::{ADAM, MOMENTUM, on_ring};
use crate::step::hook::{BucketLayout, CommHook, CommHooks};

/// Inputs of sample `i` of step `k` on rank `rank` (a fixed pattern), `n` samples, shape `shape`.
fn inputs(rank: usize, k: usize, n: usize, shape: [usize; 3]) -> Tensor {
    let d: usize = shape.iter().product();
    let x: Vec<f32> = (0..n * d)
        .map(|j| ((j * 7 + 13 * k + 101 * rank) % 23) as f32 / 11.0 - 1.0)
        .collect();
    Tensor::from_vec(x, (n, shape[0], shape[1], shape[2]), &Device::Cpu).unwrap()
}

/// The loss of a batch: mean of the squared outputs against a target of 0.5.
fn loss_of(net: &Network, x: &Tensor) -> Tensor {
    let out = net.forward(x, true).unwrap();
    (out - 0.5).unwrap().sqr().unwrap().mean_all().unwrap()
}

struct Run {
    model: ModelName,
    shape: [usize; 3],
    /// Samples per micro-batch, micro-batches per step, parts per micro-batch.
    batch: usize,
    micro: usize,
    parts: usize,
    sync_bn: bool,
    config: OptimizerConfig,
    clip: Option<f64>,
    steps: usize,
    world: usize,
    /// The overlapped run's gradients on the wire.
    wire: Wire,
}

/// `run` on rank `rank` over `comm`, overlapped or not; the final parameters, the stop answers
/// and the overlapped step's figures.
fn train(
    run: &Run,
    rank: usize,
    comm: SharedCollective,
    overlap: bool,
) -> (Vec<f32>, Vec<bool>, Vec<CommFigures>) {
    train_with(run, rank, comm, overlap.then(|| run.wire.into()))
}

/// [`train`] overlapped with `hooks` where there are some.
fn train_with(
    run: &Run,
    rank: usize,
    comm: SharedCollective,
    hooks: Option<CommHooks>,
) -> (Vec<f32>, Vec<bool>, Vec<CommFigures>) {
    let overlap = hooks.is_some();
    let route = Route::new();
    let bn = if run.sync_bn {
        BnMode::Sync(Arc::new(CollectiveStats::new(comm.clone(), route.clone())))
    } else {
        BnMode::Local
    };
    let net = Network::new(run.model, run.shape, 10, &Device::Cpu, bn, 5).unwrap();
    // Small buckets: several per step, the first smaller still.
    let cap = 64 << 10;
    let mut ddp = Ddp::new(&net, comm, cap, false).unwrap();
    if let Some(hooks) = hooks {
        assert!(ddp.overlap_buckets(&net, route, cap, hooks).unwrap());
    }
    let mut opt = Optimizer::new(run.config, ddp.num_params());
    opt.grad_clip = run.clip;
    let (mut stops, mut figures) = (Vec::new(), Vec::new());
    for k in 0..run.steps {
        let scale = 1.0 / run.micro as f32;
        for m in 0..run.micro {
            let x = inputs(rank, k * run.micro + m, run.batch, run.shape);
            let per = run.batch / run.parts;
            let last = m + 1 == run.micro;
            let (grads, hooked) = {
                let session = if last { ddp.session(scale) } else { None };
                assert_eq!(session.is_some(), overlap && last);
                // The parts side by side, each its share of the batch's loss.
                let grads: Vec<GradStore> = std::thread::scope(|s| {
                    let handles: Vec<_> = (0..run.parts)
                        .map(|part| {
                            let (net, x, session) = (&net, &x, session.as_ref());
                            s.spawn(move || {
                                let rows = x.narrow(0, part * per, per).unwrap();
                                let loss = (loss_of(net, &rows) / run.parts as f64).unwrap();
                                let hook = Hook {
                                    session,
                                    part,
                                    parts: run.parts,
                                    loss_scale: 1.0,
                                };
                                hook.backward(&loss).unwrap()
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                let stop = rank == 1 && k == 1;
                let hooked = match session {
                    Some(s) => s.finish(&net, &grads, stop).map(|()| true).unwrap(),
                    None => false,
                };
                (grads, hooked)
            };
            for g in grads.iter().filter(|_| !hooked) {
                ddp.accumulate(&net, g, scale).unwrap();
            }
        }
        stops.push(
            ddp.sync_and_step(&mut opt, 0.01, rank == 1 && k == 1)
                .unwrap()
                .stop,
        );
        figures.extend(ddp.comm_figures());
        ddp.write_params(&net).unwrap();
    }
    (ddp.params().to_vec(), stops, figures)
}

/// Trains `run` overlapped and not; checks the weights agree within `tol` (0: bit for bit) and
/// the stops agree.
fn overlapped_equals_sharded(run: Run, tol: f32) -> Vec<CommFigures> {
    let sharded = on_ring(run.world, |rank, comm| train(&run, rank, comm, false));
    let overlapped = on_ring(run.world, |rank, comm| train(&run, rank, comm, true));
    for (rank, ((a, stops_a, _), (b, stops_b, _))) in sharded.iter().zip(&overlapped).enumerate() {
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= tol,
            "rank {rank}: overlapped and sharded differ by {worst}"
        );
        assert_eq!(stops_a, stops_b);
        assert_eq!(*stops_b, (0..run.steps).map(|k| k == 1).collect::<Vec<_>>());
        assert!(*b == overlapped[0].0, "rank {rank} differs from rank 0");
    }
    let start = start_params(&run);
    let moved = start
        .iter()
        .zip(&overlapped[0].0)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(moved > 1e-4, "nothing moved ({moved})");
    overlapped.into_iter().flat_map(|(_, _, f)| f).collect()
}

/// The parameters `run` starts from.
fn start_params(run: &Run) -> Vec<f32> {
    let net = Network::new(run.model, run.shape, 10, &Device::Cpu, BnMode::Local, 5).unwrap();
    Ddp::new(&net, crate::step::ddp::tests::solo(), 1 << 20, false)
        .unwrap()
        .params()
        .to_vec()
}

/// The MLP (2.6 MB of parameters) in buckets of 64 KB (its two large matrices alone), two
/// micro-batches of two parts each.
fn mlp(world: usize, config: OptimizerConfig) -> Run {
    Run {
        model: ModelName::Mlp,
        shape: [1, 28, 28],
        batch: 8,
        micro: 2,
        parts: 2,
        sync_bn: false,
        config,
        clip: Some(0.05),
        steps: 3,
        world,
        wire: Wire::F32,
    }
}

#[test]
fn the_overlapped_step_equals_the_sharded_step_bit_for_bit_on_two_ranks() {
    let figures = overlapped_equals_sharded(mlp(2, ADAM), 0.0);
    // Several buckets, every float sent 2·(2-1)/2 times, the control element with them.
    let total = (784 * 512 + 512 + 512 * 512 + 512 + 5120 + 10 + 1) as u64;
    for f in &figures {
        assert!(f.buckets >= 4, "{f:?}");
        assert_eq!(f.bytes_sent, total * 4);
        assert!(f.busy > Duration::ZERO);
    }
}

#[test]
fn the_overlapped_step_equals_the_sharded_step_on_three_ranks() {
    overlapped_equals_sharded(mlp(3, MOMENTUM), 1e-6);
}

#[test]
fn the_overlapped_step_routes_sync_batchnorm_through_its_thread() {
    overlapped_equals_sharded(
        Run {
            model: ModelName::ConvnetBn,
            shape: [1, 28, 28],
            batch: 4,
            micro: 1,
            parts: 1,
            sync_bn: true,
            config: ADAM,
            clip: None,
            steps: 3,
            world: 2,
            wire: Wire::F32,
        },
        0.0,
    );
}

/// bf16 and fp16 on the wire: the same weights on every rank, within the 16-bit rounding of the
/// averaged gradients of the uncompressed step (SGD: an error of the gradient moves a weight by
/// lr times it), and half the bytes.
#[test]
fn compressed_buckets_stay_within_their_rounding() {
    for (codec, tol) in [(Codec::Bf16, 2e-5), (Codec::F16, 3e-6)] {
        let run = Run {
            clip: None,
            wire: Wire::Half(codec),
            ..mlp(2, MOMENTUM)
        };
        let figures = overlapped_equals_sharded(run, tol);
        let total = (784 * 512 + 512 + 512 * 512 + 512 + 5120 + 10 + 1) as u64;
        assert!(
            figures.iter().all(|f| f.bytes_sent == total * 2),
            "{figures:?}"
        );
    }
}

#[test]
fn a_dropped_session_leaves_the_buckets_untrusted() {
    let results = on_ring(2, |_, comm| {
        let net = Network::new(
            ModelName::Linear,
            [1, 1, 10],
            1,
            &Device::Cpu,
            BnMode::Local,
            3,
        )
        .unwrap();
        let mut ddp = Ddp::new(&net, comm, 1 << 20, false).unwrap();
        assert!(
            ddp.overlap_buckets(&net, Route::new(), 1 << 20, Wire::F32)
                .unwrap()
        );
        drop(ddp.session(1.0));
        let mut opt = Optimizer::new(ADAM, 11);
        ddp.sync_and_step(&mut opt, 0.1, false)
            .unwrap_err()
            .to_string()
    });
    for e in results {
        assert!(e.contains("incomplete after a failed backward"), "{e}");
    }
}

/// PowerSGD in the buckets: every rank ends with the same weights, the matrices travel as
/// factors (far fewer bytes), and training moves the weights like the uncompressed step does
/// (the factors approximate the gradient, so close but not equal).
#[test]
fn powersgd_buckets_give_every_rank_the_same_weights_for_fewer_bytes() {
    let run = Run {
        clip: None,
        micro: 1,
        parts: 1,
        steps: 4,
        wire: Wire::PowerSgd { rank: 4 },
        ..mlp(2, MOMENTUM)
    };
    let compressed = on_ring(2, |rank, comm| train(&run, rank, comm, true));
    let plain = on_ring(2, |rank, comm| {
        train(
            &Run {
                wire: Wire::F32,
                ..run
            },
            rank,
            comm,
            true,
        )
    });
    assert!(compressed[1].0 == compressed[0].0, "the ranks differ");
    assert_eq!(compressed[0].1, plain[0].1, "the stop requests");
    let total = (784 * 512 + 512 + 512 * 512 + 512 + 5120 + 10 + 1) as u64;
    // Step 1 learns the buckets' order uncompressed; then 784×512, 512×512 and 512×10 go as
    // factors of rank 4 and the biases as they are.
    let factors = (4 * (784 + 512) + 4 * (512 + 512) + 4 * (512 + 10) + 512 + 512 + 10 + 1) as u64;
    let figures = &compressed[0].2;
    assert_eq!(figures[0].bytes_sent, total * 4);
    assert!(
        figures[1..].iter().all(|f| f.bytes_sent == factors * 4),
        "{figures:?}"
    );
    let (mut moved, mut off) = (0f32, 0f32);
    let start = start_params(&run);
    for ((s, c), p) in start.iter().zip(&compressed[0].0).zip(&plain[0].0) {
        moved = moved.max((p - s).abs());
        off = off.max((c - p).abs());
    }
    assert!(
        off > 0.0 && off < moved,
        "compressed {off} off, plain moved {moved}"
    );
}

/// A hook of one's own: the f32 average, counting the hooks made and the buckets averaged.
struct Counting {
    plain: crate::step::hook::Plain,
    calls: Arc<AtomicUsize>,
}

impl CommHook for Counting {
    fn reduce(&mut self, grads: &mut [f32], comm: &mut dyn crate::dist::Collective) -> Result<u64> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.plain.reduce(grads, comm)
    }
}

/// A user's hook that averages as the built-in f32 hook does is called once for every bucket of
/// every step, made for every bucket of both layouts, and trains to the same bits.
#[test]
fn a_hook_of_ones_own_averages_every_bucket_as_the_built_in_one_it_mimics() {
    let run = mlp(2, ADAM);
    let built_in = on_ring(2, |rank, comm| train(&run, rank, comm, true));
    let own = on_ring(2, |rank, comm| {
        let (calls, made) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(Mutex::new(Vec::new())),
        );
        let (c, m) = (calls.clone(), made.clone());
        let hooks = CommHooks::new("counting", move |layout: &BucketLayout| {
            m.lock()
                .unwrap()
                .push((layout.index, layout.count, layout.learned));
            Counting {
                plain: crate::step::hook::Plain,
                calls: c.clone(),
            }
        });
        let out = train_with(&run, rank, comm, Some(hooks));
        let made = made.lock().unwrap().clone();
        (out, calls.load(Ordering::Relaxed), made)
    });
    for (rank, (((params, stops, figures), calls, made), (b_params, b_stops, b_figures))) in
        own.iter().zip(&built_in).enumerate()
    {
        assert!(
            params == b_params,
            "rank {rank}: other weights than the built-in hook's"
        );
        assert_eq!(stops, b_stops);
        let sent: Vec<u64> = figures.iter().map(|f| f.bytes_sent).collect();
        let b_sent: Vec<u64> = b_figures.iter().map(|f| f.bytes_sent).collect();
        assert_eq!(sent, b_sent);
        let buckets: usize = figures.iter().map(|f| f.buckets).sum();
        assert_eq!(*calls, buckets, "rank {rank}: one call a bucket a step");
        // Both layouts, every bucket of each once, in order.
        let (first, learned) = (figures[0].buckets, figures[1].buckets);
        let want: Vec<(usize, usize, bool)> = (0..first)
            .map(|b| (b, first, false))
            .chain((0..learned).map(|b| (b, learned, true)))
            .collect();
        assert_eq!(*made, want, "rank {rank}");
        assert!(figures.len() == run.steps && first >= 4);
    }
}
