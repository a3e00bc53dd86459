//! The `tcp` backend: every rank holds one socket to the next rank and one from the previous
//! rank, and runs the collectives as pipelined passes around that ring.
//!
//! Layout:
//! - setup ([`TcpRing::connect`]): listen on an ephemeral port, publish it in the store, connect
//!   to rank+1 while a helper thread accepts rank−1 (HMAC challenge when a token is set; the
//!   two ends of a link in `connect.rs`);
//! - the pump (`pump.rs`): one poll(2) loop per pass that writes to `next` and reads from `prev` at the
//!   same time on nonblocking sockets, with a [`Flow`] saying where bytes come from and go to
//!   (copy, reduce into place, reduce 16-bit values into f32, or relay what just arrived);
//! - the op header (`head.rs`): the first pass of every op carries a 32-byte header (op,
//!   sequence number, length) so ranks that issue different collectives fail with a clear
//!   message, not a hang;
//! - the passes and the [`Collective`] implementation (here): ring all-reduce (reduce-scatter + all-gather over W
//!   segments), the compressed all-reduce (16-bit values on the wire, [`crate::dist::codec`]),
//!   pipelined chain broadcast, ring all-gather, two-pass all-gather of bytes.
//!
//! Floats travel as little-endian f32 (the in-memory layout on every supported host), or as
//! little-endian 16-bit floats in the compressed all-reduce.

#[cfg(target_endian = "big")]
compile_error!("the tcp backend sends f32 in memory order and assumes a little-endian host");

use std::io::{self, ErrorKind};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener};
use std::ops::Range;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::codec::Codec;
use super::store::StoreClient;
use super::{Collective, ReduceOp};
use crate::{Error, Result};

/// Upper bound of the reduce staging buffer: received bytes land here and are added into place
/// while still in cache; larger segments stream through it. 128 KiB stays in L2 and measured
/// as fast as 1 MiB.
const STAGE_MAX_FLOATS: usize = 32 << 10;

/// Splits `buf` into a shared view of `a` and a mutable view of `b` (disjoint, ordered ranges).
fn disjoint<T>(buf: &mut [T], a: Range<usize>, b: Range<usize>) -> (&[T], &mut [T]) {
    if a.start >= b.end {
        let (lo, hi) = buf.split_at_mut(a.start);
        (&hi[..a.len()], &mut lo[b])
    } else {
        debug_assert!(a.end <= b.start, "ranges {a:?} and {b:?} overlap");
        let (lo, hi) = buf.split_at_mut(b.start);
        (&lo[a], &mut hi[..b.len()])
    }
}

/// Ring all-gather over `w` segments of `out`: at pass `s` send segment `first − s` and receive
/// segment `first − s − 1` (indices mod w). The segment `first` must already be in place.
fn gather_passes(
    run: &Run,
    with_head: bool,
    first: usize,
    out: &mut [u8],
    seg: impl Fn(usize) -> Range<usize>,
) -> Result<()> {
    let w = run.world_size;
    for s in 0..w - 1 {
        let send_i = (first + 2 * w - s) % w;
        let recv_i = (first + 2 * w - s - 1) % w;
        let (src, dst) = disjoint(out, seg(send_i), seg(recv_i));
        let mut flow = CopyFlow {
            src,
            sent: 0,
            dst,
            got: 0,
        };
        let h = with_head && s == 0;
        pump(run, h, h, &mut flow)?;
    }
    Ok(())
}

/// Ring all-reduce in place: W−1 reduce-scatter passes (rank r ends up owning segment r+1),
/// then W−1 all-gather passes.
fn all_reduce_passes(run: &Run, stage: &mut Vec<f32>, buf: &mut [f32], op: ReduceOp) -> Result<()> {
    reduce_scatter_passes(run, stage, buf, op)?;
    gather_shard_passes(run, false, buf)
}

/// The segment rank `r` of `w` owns after the reduce-scatter passes.
fn owned_segment(n: usize, w: usize, r: usize) -> Range<usize> {
    segment(n, w, (r + 1) % w)
}

/// W−1 all-gather passes of the owned segments (see [`owned_segment`]).
fn gather_shard_passes(run: &Run, with_head: bool, buf: &mut [f32]) -> Result<()> {
    let n = buf.len();
    let w = run.world_size;
    gather_passes(
        run,
        with_head,
        run.ctx.rank + 1,
        bytemuck::cast_slice_mut(buf),
        |i| {
            let seg = segment(n, w, i);
            seg.start * 4..seg.end * 4
        },
    )
}

/// W−1 reduce-scatter passes: rank r ends up with the reduced segment r+1.
fn reduce_scatter_passes(
    run: &Run,
    stage: &mut Vec<f32>,
    buf: &mut [f32],
    op: ReduceOp,
) -> Result<()> {
    let (n, w, r) = (buf.len(), run.world_size, run.ctx.rank);
    let widest = n.div_ceil(w).clamp(1, STAGE_MAX_FLOATS);
    if stage.len() < widest {
        // Grows only when a larger op comes; reused by every later op.
        stage.resize(widest, 0.0);
    }
    let scale = 1.0 / w as f32;
    for s in 0..w - 1 {
        let send_i = (r + 2 * w - s) % w;
        let recv_i = (r + 2 * w - s - 1) % w;
        let (src, dst) = disjoint(buf, segment(n, w, send_i), segment(n, w, recv_i));
        let mut flow = ReduceFlow {
            src: bytemuck::cast_slice(src),
            sent: 0,
            dst,
            done: 0,
            stage: stage.as_mut_slice(),
            fill: 0,
            got: 0,
            scale: (op == ReduceOp::Avg && s == w - 2).then_some(scale),
        };
        pump(run, s == 0, s == 0, &mut flow)?;
    }
    Ok(())
}

// The compressed all-reduce ([`crate::dist::codec`]): W−1 reduce-scatter passes that send
// 16-bit partial sums and add in f32, the owned segment rounded to 16 bits, then W−1 all-gather
// passes of the 16-bit segments.

/// Buffers a compressed all-reduce reuses from op to op.
#[derive(Default)]
struct CodedBuffers {
    /// Received 16-bit values not yet added.
    stage: Vec<u8>,
    /// The segment being sent, encoded.
    send: Vec<u8>,
    /// The whole buffer encoded, for the all-gather.
    all: Vec<u8>,
}

/// The op's header: the reduce op in bit 0 of `extra`, the codec above it.
fn coded_head(seq: u64, len: usize, op: ReduceOp, codec: Codec) -> Head {
    let code = match codec {
        Codec::Bf16 => 1,
        Codec::F16 => 2,
    };
    Head {
        op: OpCode::AllReduceCoded,
        seq,
        count: len as u64,
        extra: (op == ReduceOp::Avg) as u64 | code << 1,
    }
}

/// Compressed ring all-reduce of `buf` in place; every rank ends with the same bits.
fn all_reduce_coded_passes(
    run: &Run,
    b: &mut CodedBuffers,
    buf: &mut [f32],
    op: ReduceOp,
    codec: Codec,
) -> Result<()> {
    let (n, w, r) = (buf.len(), run.world_size, run.ctx.rank);
    let widest = n.div_ceil(w).clamp(1, STAGE_MAX_FLOATS);
    b.stage.resize(widest * Codec::WIDTH, 0);
    let scale = 1.0 / w as f32;
    for s in 0..w - 1 {
        let send_i = (r + 2 * w - s) % w;
        let recv_i = (r + 2 * w - s - 1) % w;
        let (src, dst) = disjoint(buf, segment(n, w, send_i), segment(n, w, recv_i));
        b.send.resize(src.len() * Codec::WIDTH, 0);
        codec.encode(src, &mut b.send);
        let mut flow = CodedReduceFlow {
            src: &b.send,
            sent: 0,
            dst,
            done: 0,
            stage: &mut b.stage,
            fill: 0,
            got: 0,
            scale: (op == ReduceOp::Avg && s == w - 2).then_some(scale),
            codec,
        };
        pump(run, s == 0, s == 0, &mut flow)?;
    }
    // The owned segment's sum, as 16 bits carry it: what every other rank will receive.
    let own = owned_segment(n, w, r);
    b.all.resize(n * Codec::WIDTH, 0);
    let bytes = |seg: std::ops::Range<usize>| seg.start * Codec::WIDTH..seg.end * Codec::WIDTH;
    codec.encode(&buf[own.clone()], &mut b.all[bytes(own)]);
    gather_passes(run, false, r + 1, &mut b.all, |i| bytes(segment(n, w, i)))?;
    codec.decode(&b.all, buf);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// TcpRing
// ---------------------------------------------------------------------------------------------

/// The `tcp` backend: a ring of TCP sockets between the ranks (no sockets with one rank).
pub struct TcpRing {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    links: Option<Links>,
    /// Sequence number of the last op (the first op is #1).
    seq: u64,
    /// Reduce staging buffer, reused by every all-reduce.
    stage: Vec<f32>,
    /// Lengths exchanged by `all_gather_bytes`, reused.
    lens: Vec<u8>,
    /// Set after a failure: the streams may be out of step, so every later op fails too.
    broken: Option<String>,
    /// The compressed all-reduce's buffers, reused.
    coded: CodedBuffers,
}

impl TcpRing {
    /// How long a collective may go without progress.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A ring of one: every op is a no-op or a copy.
    pub fn single(timeout: Duration) -> TcpRing {
        TcpRing {
            rank: 0,
            world_size: 1,
            timeout,
            links: None,
            seq: 0,
            stage: Vec::new(),
            lens: Vec::new(),
            broken: None,
            coded: CodedBuffers::default(),
        }
    }

    /// Builds the ring: listens on `bind_ip` (ephemeral port), publishes the address in the
    /// store, connects to rank+1 and accepts rank−1. With a token, each link is authenticated
    /// with the same HMAC challenge as the store. Every wait is bounded by `timeout`, which
    /// also becomes the collectives' timeout.
    pub fn connect(
        store: &mut StoreClient,
        rank: usize,
        world_size: usize,
        bind_ip: IpAddr,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<TcpRing> {
        Self::connect_generation(store, 0, rank, world_size, bind_ip, token, timeout)
    }

    /// [`TcpRing::connect`] for `generation` of an elastic group (its own store keys), with
    /// the ranks and world size of that generation.
    pub fn connect_generation(
        store: &mut StoreClient,
        generation: u64,
        rank: usize,
        world_size: usize,
        bind_ip: IpAddr,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<TcpRing> {
        let fail = |msg: String| Error::Rendezvous { rank, msg };
        if rank >= world_size {
            return Err(fail(format!(
                "RANK={rank} is out of range for WORLD_SIZE={world_size}"
            )));
        }
        if world_size == 1 {
            return Ok(TcpRing::single(timeout));
        }
        let token = token.filter(|t| !t.is_empty());
        let next_rank = (rank + 1) % world_size;
        let prev_rank = (rank + world_size - 1) % world_size;
        let deadline = Instant::now() + timeout;

        let listener = TcpListener::bind(SocketAddr::new(bind_ip, 0))
            .map_err(|e| fail(format!("cannot open the ring port on {bind_ip}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| fail(format!("ring port on {bind_ip}: {e}")))?;
        store.set(&addr_key(generation, rank), local.to_string().as_bytes())?;

        // Accept the predecessor in a helper thread while this thread connects to the successor:
        // with a token both handshakes need round trips, and doing them one after the other
        // would deadlock around the ring.
        let cancel = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let cancel = Arc::clone(&cancel);
            let token = token.map(String::from);
            std::thread::Builder::new()
                .name("ddp-ring-accept".into())
                .spawn(move || {
                    accept_prev(
                        listener,
                        rank,
                        world_size,
                        prev_rank,
                        token.as_deref(),
                        deadline,
                        &cancel,
                    )
                })
                .map_err(|e| fail(format!("cannot start the ring accept thread: {e}")))?
        };
        let next = connect_next(
            store, generation, rank, world_size, next_rank, token, deadline, timeout,
        );
        if next.is_err() {
            cancel.store(true, Ordering::SeqCst);
        }
        let prev = acceptor
            .join()
            .map_err(|_| fail("the ring accept thread panicked".into()))?;
        let (next, prev) = (next?, prev.map_err(fail)?);

        for (stream, peer) in [(&next, next_rank), (&prev, prev_rank)] {
            let setup = |e: io::Error| fail(format!("socket to rank {peer}: {e}"));
            stream.set_nodelay(true).map_err(setup)?;
            stream.set_read_timeout(None).map_err(setup)?;
            stream.set_nonblocking(true).map_err(setup)?;
        }
        Ok(TcpRing {
            rank,
            world_size,
            timeout,
            links: Some(Links {
                next,
                prev,
                next_rank,
                prev_rank,
            }),
            seq: 0,
            stage: Vec::new(),
            lens: Vec::new(),
            broken: None,
            coded: CodedBuffers::default(),
        })
    }

    /// Sequence number of the last op issued (0 before the first).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Capacity of the reduce staging buffer in floats (for tests of buffer reuse).
    #[cfg(test)]
    fn stage_capacity(&self) -> usize {
        self.stage.capacity()
    }

    /// Starts an op: next sequence number, and refuses to run on a broken ring.
    fn begin(&mut self, op: OpCode) -> Result<Ctx> {
        self.begin_named(op.name())
    }

    fn begin_named(&mut self, op: &'static str) -> Result<Ctx> {
        self.seq += 1;
        let ctx = Ctx {
            op,
            seq: self.seq,
            rank: self.rank,
            timeout: self.timeout,
        };
        match &self.broken {
            Some(first) => Err(ctx.fail(
                None,
                format!("the ring is unusable after an earlier failure: {first}"),
            )),
            None => Ok(ctx),
        }
    }

    /// Numbers an op that runs on another transport (shared memory) in this ring's sequence, so
    /// errors count ops the same way whichever transport carried them; refuses on a broken ring.
    pub(crate) fn begin_external(&mut self, op: &'static str) -> Result<u64> {
        self.begin_named(op).map(|ctx| ctx.seq)
    }

    /// Ends an op of another transport: a failure breaks the ring like one of its own, so the
    /// neighbours see the closed sockets at once.
    pub(crate) fn finish_external<T>(&mut self, result: Result<T>) -> Result<T> {
        self.finish(result)
    }

    /// The rank of a ring neighbour whose connection has closed (it exited or crashed), checked
    /// without blocking and without consuming data. None while both are connected.
    pub(crate) fn closed_neighbour(&self) -> Option<usize> {
        let links = self.links.as_ref()?;
        [
            (&links.next, links.next_rank),
            (&links.prev, links.prev_rank),
        ]
        .into_iter()
        .find(|(stream, _)| peer_closed(stream.as_raw_fd()))
        .map(|(_, rank)| rank)
    }

    /// Ends an op: after a failure the sockets are shut down so the neighbours fail at once
    /// instead of waiting for their timeout, and the ring refuses further ops.
    fn finish<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            self.broken = Some(e.to_string());
            if let Some(links) = &self.links {
                let _ = links.next.shutdown(Shutdown::Both);
                let _ = links.prev.shutdown(Shutdown::Both);
            }
        }
        result
    }

    fn reduce(&mut self, code: OpCode, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        // Only a reduce-scatter stops halfway; an all-reduce and a barrier (a one-element
        // all-reduce) run both halves.
        let scatter_only = code == OpCode::ReduceScatter;
        let ctx = self.begin(code)?;
        let Some(links) = &self.links else {
            return Ok(());
        };
        let head = Head {
            op: code,
            seq: ctx.seq,
            count: buf.len() as u64,
            extra: (op == ReduceOp::Avg) as u64,
        };
        let run = Run {
            links,
            ctx,
            head,
            world_size: self.world_size,
        };
        let result = if scatter_only {
            reduce_scatter_passes(&run, &mut self.stage, buf, op)
        } else {
            all_reduce_passes(&run, &mut self.stage, buf, op)
        };
        self.finish(result)
    }
}

/// Whether the peer of a connected socket has closed it: a peek reads end-of-file or an error
/// other than "would block".
fn peer_closed(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: `fd` is an open socket owned by the ring; recv writes at most one byte into `byte`.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => {
            let e = io::Error::last_os_error().kind();
            !matches!(e, ErrorKind::WouldBlock | ErrorKind::Interrupted)
        }
    }
}

impl Collective for TcpRing {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        self.reduce(OpCode::AllReduce, buf, op)
    }

    fn all_reduce_coded(&mut self, buf: &mut [f32], op: ReduceOp, codec: Codec) -> Result<()> {
        let ctx = self.begin(OpCode::AllReduceCoded)?;
        let Some(links) = &self.links else {
            return Ok(());
        };
        let run = Run {
            links,
            head: coded_head(ctx.seq, buf.len(), op, codec),
            ctx,
            world_size: self.world_size,
        };
        let result = all_reduce_coded_passes(&run, &mut self.coded, buf, op, codec);
        self.finish(result)
    }

    fn broadcast(&mut self, buf: &mut [f32], root: usize) -> Result<()> {
        let ctx = self.begin(OpCode::Broadcast)?;
        if root >= self.world_size {
            return Err(ctx.fail(
                None,
                format!(
                    "root {root} is out of range for world size {}",
                    self.world_size
                ),
            ));
        }
        let Some(links) = &self.links else {
            return Ok(());
        };
        let w = self.world_size;
        let hop = (self.rank + w - root) % w;
        let head = Head {
            op: OpCode::Broadcast,
            seq: ctx.seq,
            count: buf.len() as u64,
            extra: root as u64,
        };
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let len = bytes.len();
        let is_root = hop == 0;
        let forward = hop != w - 1;
        let mut flow = RelayFlow {
            buf: bytes,
            got: if is_root { len } else { 0 },
            sent: 0,
            forward,
        };
        let run = Run {
            links,
            ctx,
            head,
            world_size: w,
        };
        let result = pump(&run, forward, !is_root, &mut flow);
        self.finish(result)
    }

    fn all_gather(&mut self, input: &[f32], output: &mut [f32]) -> Result<()> {
        let ctx = self.begin(OpCode::AllGather)?;
        let (n, w, r) = (input.len(), self.world_size, self.rank);
        if output.len() != n * w {
            return Err(ctx.fail(
                None,
                format!(
                    "output has {} elements but input × world size is {n} × {w} = {}",
                    output.len(),
                    n * w
                ),
            ));
        }
        output[r * n..(r + 1) * n].copy_from_slice(input);
        let Some(links) = &self.links else {
            return Ok(());
        };
        let head = Head {
            op: OpCode::AllGather,
            seq: ctx.seq,
            count: n as u64,
            extra: 0,
        };
        let out: &mut [u8] = bytemuck::cast_slice_mut(output);
        let run = Run {
            links,
            ctx,
            head,
            world_size: w,
        };
        let result = gather_passes(&run, true, r, out, |i| i * n * 4..(i + 1) * n * 4);
        self.finish(result)
    }

    fn shard(&self, len: usize, rank: usize) -> Range<usize> {
        owned_segment(len, self.world_size, rank)
    }

    fn reduce_scatter(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        self.reduce(OpCode::ReduceScatter, buf, op)
    }

    fn all_gather_shards(&mut self, buf: &mut [f32]) -> Result<()> {
        let ctx = self.begin(OpCode::AllGatherShards)?;
        let Some(links) = &self.links else {
            return Ok(());
        };
        let head = Head {
            op: OpCode::AllGatherShards,
            seq: ctx.seq,
            count: buf.len() as u64,
            extra: 0,
        };
        let run = Run {
            links,
            ctx,
            head,
            world_size: self.world_size,
        };
        let result = gather_shard_passes(&run, true, buf);
        self.finish(result)
    }

    fn all_gather_bytes(&mut self, input: &[u8]) -> Result<Vec<Vec<u8>>> {
        let ctx = self.begin(OpCode::AllGatherBytes)?;
        let Some(links) = &self.links else {
            return Ok(vec![input.to_vec()]);
        };
        let (w, r) = (self.world_size, self.rank);
        let head = Head {
            op: OpCode::AllGatherBytes,
            seq: ctx.seq,
            count: 0,
            extra: 0,
        };
        // Pass 1: every rank's length (8 bytes each).
        self.lens.resize(w * 8, 0);
        self.lens[r * 8..r * 8 + 8].copy_from_slice(&(input.len() as u64).to_le_bytes());
        let lens = &mut self.lens;
        let run = Run {
            links,
            ctx,
            head,
            world_size: w,
        };
        let result = gather_passes(&run, true, r, lens, |i| i * 8..i * 8 + 8).and_then(|()| {
            let mut offsets = Vec::with_capacity(w + 1);
            offsets.push(0usize);
            for i in 0..w {
                let len = u64::from_le_bytes(lens[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| offsets[i].checked_add(l))
                    .ok_or_else(|| {
                        ctx.fail(
                            Some(i),
                            format!("rank {i} announced an impossible length {len}"),
                        )
                    })?;
                offsets.push(end);
            }
            // Pass 2: the payloads, each rank's at its offset.
            let mut all = vec![0u8; offsets[w]];
            all[offsets[r]..offsets[r + 1]].copy_from_slice(input);
            gather_passes(&run, false, r, &mut all, |i| offsets[i]..offsets[i + 1])?;
            Ok((0..w)
                .map(|i| all[offsets[i]..offsets[i + 1]].to_vec())
                .collect())
        });
        self.finish(result)
    }

    fn barrier(&mut self) -> Result<()> {
        // A one-element all-reduce: its result depends on every rank's input, so no rank can
        // leave before all have entered.
        let mut token = [0f32; 1];
        self.reduce(OpCode::Barrier, &mut token, ReduceOp::Sum)
    }
}

mod connect;
mod head;
mod pump;
#[cfg(test)]
pub(crate) mod tests;

use crate::dist::segment::segment;
use connect::{accept_prev, addr_key, connect_next};
use head::{Head, OpCode};
pub(crate) use pump::closed_by;
use pump::{CodedReduceFlow, CopyFlow, Ctx, Links, ReduceFlow, RelayFlow, Run, pump};
