//! The host DDP step as the spec sets it up: the bucket size (`ddp.bucket_mb`, `"auto"` timed
//! on the link), overlap and compression (`ddp.overlap`, `ddp.compression`, or the
//! communication hook the executable registered, [`crate::Trainer::comm_hook`]), or local steps
//! (`[ddp.sync]`), and the lines rank 0's log says of them.

use std::sync::Arc;

use crate::dist::codec::Codec;
use crate::dist::probe;
use crate::models::Network;
use crate::spec::{BucketMb, Compression, DdpSpec, LocalSync, Spec, SyncEncoding, SyncMethod};
use crate::step::comm::{Route, SharedCollective, with_comm};
use crate::step::ddp::Ddp;
use crate::step::hook::{self, CommHooks, Wire};
use crate::{Error, Result};

/// Bytes in a MiB, for the log lines.
const MIB: f64 = 1024.0 * 1024.0;

/// The DDP step of `net` over `comm` (`host_step`: the flat buffers on the host, shared with the
/// other ranks where they can be; else the device step's own); `route` is SyncBatchNorm's.
/// Every rank starts from rank `root`'s parameters and buffers.
#[allow(clippy::too_many_arguments)]
pub(super) fn ddp_step(
    spec: &Spec,
    net: &Network,
    comm: &SharedCollective,
    route: Arc<Route>,
    host_step: bool,
    rank: usize,
    world: usize,
    root: usize,
) -> Result<Ddp> {
    let own = hook::registered();
    if own.is_some() && spec.ddp.overlap && !spec.ddp.compression.is_none() {
        return Err(Error::Model(format!(
            "ddp.compression = \"{}\" and a registered communication hook both say how the \
             gradients travel: set ddp.compression = \"none\" to use the hook",
            spec.ddp.compression.name()
        )));
    }
    let bucket_bytes = match spec.ddp.bucket_mb {
        BucketMb::Size(mb) => (mb * 1024.0 * 1024.0) as usize,
        BucketMb::Auto if world > 1 => {
            let grads: usize = net.params.iter().map(|(_, v)| v.elem_count() * 4).sum();
            let (bytes, link) = with_comm(comm, |c| probe::agreed_bucket_bytes(c, grads))?;
            if rank == 0 {
                println!(
                    "ddp.bucket_mb = auto: buckets of {:.1} MB (link measured at start: {:.2} ms \
                     a message, {:.1} MB/s; gradients {:.1} MB; sqrt(gradients x latency x \
                     bandwidth) = {:.2} MB, kept within 1-25 MB)",
                    bytes as f64 / MIB,
                    link.latency.as_secs_f64() * 1e3,
                    link.bytes_per_s / 1e6,
                    grads as f64 / 1e6,
                    probe::ideal_bucket_bytes(&link, grads) / MIB,
                );
            }
            bytes
        }
        BucketMb::Auto => probe::AUTO_MAX,
    };
    if let Some(sync) = spec.ddp.sync.local() {
        return local_steps(
            spec,
            net,
            comm,
            host_step,
            rank,
            world,
            root,
            bucket_bytes,
            sync,
        );
    }
    let mut ddp = match spec.ddp.elastic {
        // Any replica may be lost: each keeps the whole optimizer state, not a shard of it.
        Some(_) if host_step => Ddp::new_private(
            net,
            comm.clone(),
            bucket_bytes,
            "an elastic group keeps the whole optimizer state on every replica",
            root,
        )?,
        _ => Ddp::from_root(net, comm.clone(), bucket_bytes, host_step, root)?,
    };
    let wire = match spec.ddp.compression {
        Compression::None => Wire::F32,
        Compression::Bf16 => Wire::Half(Codec::Bf16),
        Compression::Fp16 => Wire::Half(Codec::F16),
        Compression::Powersgd => Wire::PowerSgd {
            rank: spec.ddp.powersgd_rank.unwrap_or(DdpSpec::POWERSGD_RANK),
        },
    };
    let hooks = own.clone().unwrap_or_else(|| CommHooks::from(wire));
    let overlapped =
        spec.ddp.overlap && host_step && ddp.overlap_buckets(net, route, bucket_bytes, hooks)?;
    if rank == 0 && world > 1 && host_step {
        match ddp.private_because() {
            None => println!("gradients and parameters shared in place between the ranks"),
            Some(why) => println!("gradients and parameters copied between the ranks: {why}"),
        }
        if overlapped {
            let cap = match spec.ddp.bucket_mb {
                BucketMb::Size(mb) => mb,
                BucketMb::Auto => (bucket_bytes as f64 / MIB * 10.0).round() / 10.0,
            };
            let first = cap.min(1.0);
            println!(
                "gradients all-reduced in buckets of {cap} MB (the first {first} MB) while backward runs"
            );
        }
        match (&own, wire) {
            (Some(h), _) if overlapped => println!(
                "gradients averaged by the registered communication hook \"{}\"",
                h.name()
            ),
            (Some(h), _) => println!(
                "the registered communication hook \"{}\" not applied: it averages the \
                 overlapped step's buckets (ddp.overlap = true, the ranks on several hosts or \
                 ddp.shared_memory = false)",
                h.name()
            ),
            (None, Wire::Half(k)) if overlapped => {
                println!(
                    "gradients sent as {} (16 bits a value), added in f32",
                    k.name()
                );
            }
            (None, Wire::PowerSgd { rank }) if overlapped => println!(
                "gradients sent as PowerSGD factors of rank {rank} (matrices; the rest f32), \
                 with error feedback"
            ),
            (None, Wire::F32) => {}
            _ => println!(
                "ddp.compression = \"{}\" not applied: the ranks share memory, gradients \
                 stay f32",
                spec.ddp.compression.name()
            ),
        }
    }
    Ok(ddp)
}

/// The host step taking local steps synced as `sync` says (private buffers, whatever the
/// placement: each replica's own weights and whole optimizer), and what rank 0's log says of it.
#[allow(clippy::too_many_arguments)]
fn local_steps(
    spec: &Spec,
    net: &Network,
    comm: &SharedCollective,
    host_step: bool,
    rank: usize,
    world: usize,
    root: usize,
    bucket_bytes: usize,
    sync: LocalSync,
) -> Result<Ddp> {
    let method = spec.ddp.sync.method;
    if !host_step {
        return Err(spec.error(
            "ddp.sync.method",
            format!(
                "\"{}\" runs the host step (CPU replicas) in this build, and these replicas are \
                 on GPUs: set ddp.devices = \"cpu\" or ddp.sync.method = \"every_step\"",
                method.name()
            ),
        ));
    }
    if sync.fragments > net.params.len() {
        return Err(spec.error(
            "ddp.sync.fragments",
            format!(
                "is {} but the model has {} parameters, and a fragment is one or more whole \
                 parameters: set it to at most {}",
                sync.fragments,
                net.params.len(),
                net.params.len()
            ),
        ));
    }
    let mut ddp = Ddp::new_private(
        net,
        comm.clone(),
        bucket_bytes,
        "each replica takes local steps on its own weights",
        root,
    )?;
    ddp.local_steps(sync)?;
    if rank == 0 {
        println!("{}", describe(&sync, world));
    }
    Ok(ddp)
}

/// What rank 0's log says of the local steps.
fn describe(s: &LocalSync, world: usize) -> String {
    let every = s.every;
    let what = match s.method {
        SyncMethod::Average => format!("weights averaged every {every} steps (local SGD)"),
        SyncMethod::Streaming => format!(
            "DiLoCo in {} fragments, each synced every {every} steps in turn, sent during the \
             {} steps after and mixed {} own : {} synced; outer SGD lr {} Nesterov momentum {}",
            s.fragments,
            s.delay,
            s.mixing,
            1.0 - s.mixing,
            s.outer_lr,
            s.outer_momentum
        ),
        _ => format!(
            "DiLoCo: the averaged change of the weights every {every} steps is the gradient of an \
             outer SGD, lr {} Nesterov momentum {}",
            s.outer_lr, s.outer_momentum
        ),
    };
    let warmup = match s.warmup_steps {
        0 => String::new(),
        n => format!(" after {n} synchronous steps"),
    };
    let encoding = match s.encoding {
        SyncEncoding::F32 => "f32".to_string(),
        SyncEncoding::Bf16 => "bf16 (16 bits a value)".to_string(),
        e => format!(
            "{} with an f32 scale per block of {} values",
            e.name(),
            crate::dist::quant::BLOCK
        ),
    };
    let feedback = if s.error_feedback {
        ", with error feedback"
    } else {
        ""
    };
    format!(
        "local steps: {what}{warmup}; syncs sent as {encoding}{feedback}; {world} replicas, each \
         with its own weights and whole optimizer between syncs"
    )
}
