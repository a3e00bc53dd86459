//! The `tcp` backend: every rank holds one socket to the next rank and one from the previous
//! rank, and runs the collectives as pipelined passes around that ring.
//!
//! Layout:
//! - setup ([`TcpRing::connect`]): listen on an ephemeral port, publish it in the store, connect
//!   to rank+1 while a helper thread accepts rank−1 (HMAC challenge when a token is set);
//! - the pump: one poll(2) loop per pass that writes to `next` and reads from `prev` at the
//!   same time on nonblocking sockets, with a [`Flow`] saying where bytes come from and go to
//!   (copy, reduce into place, or relay what just arrived);
//! - the op header: the first pass of every op carries a 32-byte header (op, sequence number,
//!   length) so ranks that issue different collectives fail with a clear message, not a hang;
//! - the [`Collective`] implementation: ring all-reduce (reduce-scatter + all-gather over W
//!   segments), pipelined chain broadcast, ring all-gather, two-pass all-gather of bytes.
//!
//! Floats travel as little-endian f32 (the in-memory layout on every supported host).

#[cfg(target_endian = "big")]
compile_error!("the tcp backend sends f32 in memory order and assumes a little-endian host");

use std::io::{self, ErrorKind};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::store::{self, Refusal, Response, StoreClient};
use super::{Collective, ReduceOp};
use crate::{Error, Result};

/// Domain separation of the ring links' HMAC answers.
const RING_PURPOSE: &[u8] = b"ddp-ring-v1";
/// Upper bound of the reduce staging buffer: received bytes land here and are added into place
/// while still in cache; larger segments stream through it. 128 KiB stays in L2 and measured
/// as fast as 1 MiB.
const STAGE_MAX_FLOATS: usize = 32 << 10;

/// Store key under which rank `r` publishes its ring listener.
fn addr_key(rank: usize) -> String {
    format!("ring/{rank}/addr")
}

// ---------------------------------------------------------------------------------------------
// Op header
// ---------------------------------------------------------------------------------------------

const HEAD_LEN: usize = 32;
const HEAD_MAGIC: u32 = u32::from_le_bytes(*b"DDPr");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
enum OpCode {
    AllReduce = 1,
    Broadcast = 2,
    AllGather = 3,
    AllGatherBytes = 4,
    Barrier = 5,
    ReduceScatter = 6,
    AllGatherShards = 7,
}

impl OpCode {
    fn name(self) -> &'static str {
        match self {
            OpCode::AllReduce => "all_reduce",
            OpCode::Broadcast => "broadcast",
            OpCode::AllGather => "all_gather",
            OpCode::AllGatherBytes => "all_gather_bytes",
            OpCode::Barrier => "barrier",
            OpCode::ReduceScatter => "reduce_scatter",
            OpCode::AllGatherShards => "all_gather_shards",
        }
    }

    fn from_u32(v: u32) -> Option<OpCode> {
        [
            OpCode::AllReduce,
            OpCode::Broadcast,
            OpCode::AllGather,
            OpCode::AllGatherBytes,
            OpCode::Barrier,
            OpCode::ReduceScatter,
            OpCode::AllGatherShards,
        ]
        .into_iter()
        .find(|op| *op as u32 == v)
    }
}

/// What every rank must agree on for one op: sent ahead of the op's first pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    op: OpCode,
    seq: u64,
    /// Elements per rank (all_gather_bytes: 0, lengths differ by design).
    count: u64,
    /// all_reduce, reduce_scatter: 0 sum / 1 avg; broadcast: the root.
    extra: u64,
}

impl Head {
    fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[0..4].copy_from_slice(&HEAD_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&(self.op as u32).to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        b[24..32].copy_from_slice(&self.extra.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HEAD_LEN]) -> Option<Head> {
        let word = |r: Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
        if u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")) != HEAD_MAGIC {
            return None;
        }
        let op = OpCode::from_u32(u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")))?;
        Some(Head {
            op,
            seq: word(8..16),
            count: word(16..24),
            extra: word(24..32),
        })
    }

    fn describe(&self) -> String {
        let what = match self.op {
            OpCode::AllReduce | OpCode::ReduceScatter => {
                format!(
                    " ({}, {} elements)",
                    if self.extra == 1 { "avg" } else { "sum" },
                    self.count
                )
            }
            OpCode::Broadcast => format!(" (root {}, {} elements)", self.extra, self.count),
            OpCode::AllGather => format!(" ({} elements per rank)", self.count),
            OpCode::AllGatherShards => format!(" ({} elements)", self.count),
            OpCode::AllGatherBytes | OpCode::Barrier => String::new(),
        };
        format!("{} #{}{what}", self.op.name(), self.seq)
    }
}

// ---------------------------------------------------------------------------------------------
// Flows: where the bytes of one pass come from and go to
// ---------------------------------------------------------------------------------------------

/// One pass of an op: bytes written to `next` and bytes read from `prev`, both counted exactly
/// (the streams carry consecutive ops back to back, so a pass never reads past its own bytes).
trait Flow {
    /// Bytes still to write to `next` (including bytes not available yet: relay).
    fn send_left(&self) -> usize;
    /// The bytes that can be written now (may be empty while `send_left() > 0`).
    fn send_buf(&self) -> &[u8];
    fn sent(&mut self, n: usize);
    /// Bytes still to read from `prev`.
    fn recv_left(&self) -> usize;
    /// Where the next received bytes go; non-empty and at most `recv_left()` long when
    /// `recv_left() > 0`.
    fn recv_buf(&mut self) -> &mut [u8];
    fn received(&mut self, n: usize);
}

/// Sends `src` while receiving into `dst` (all-gather passes).
struct CopyFlow<'a> {
    src: &'a [u8],
    sent: usize,
    dst: &'a mut [u8],
    got: usize,
}

impl Flow for CopyFlow<'_> {
    fn send_left(&self) -> usize {
        self.src.len() - self.sent
    }
    fn send_buf(&self) -> &[u8] {
        &self.src[self.sent..]
    }
    fn sent(&mut self, n: usize) {
        self.sent += n;
    }
    fn recv_left(&self) -> usize {
        self.dst.len() - self.got
    }
    fn recv_buf(&mut self) -> &mut [u8] {
        &mut self.dst[self.got..]
    }
    fn received(&mut self, n: usize) {
        self.got += n;
    }
}

/// Sends `src` while receiving f32s through the staging buffer and adding them into `dst`
/// (reduce-scatter passes). `scale` multiplies the sums (the last pass of an average).
struct ReduceFlow<'a> {
    src: &'a [u8],
    sent: usize,
    dst: &'a mut [f32],
    /// Floats of `dst` already reduced.
    done: usize,
    stage: &'a mut [f32],
    /// Bytes in `stage` not yet reduced (fewer than 4 after each `received`).
    fill: usize,
    /// Bytes received so far.
    got: usize,
    scale: Option<f32>,
}

impl Flow for ReduceFlow<'_> {
    fn send_left(&self) -> usize {
        self.src.len() - self.sent
    }
    fn send_buf(&self) -> &[u8] {
        &self.src[self.sent..]
    }
    fn sent(&mut self, n: usize) {
        self.sent += n;
    }
    fn recv_left(&self) -> usize {
        self.dst.len() * 4 - self.got
    }
    fn recv_buf(&mut self) -> &mut [u8] {
        let left = self.recv_left();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(self.stage);
        let end = bytes.len().min(self.fill + left);
        &mut bytes[self.fill..end]
    }
    fn received(&mut self, n: usize) {
        self.got += n;
        self.fill += n;
        let whole = self.fill / 4;
        let dst = &mut self.dst[self.done..self.done + whole];
        let src = &self.stage[..whole];
        match self.scale {
            None => dst.iter_mut().zip(src).for_each(|(d, s)| *d += *s),
            Some(k) => dst
                .iter_mut()
                .zip(src)
                .for_each(|(d, s)| *d = (*d + *s) * k),
        }
        self.done += whole;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(self.stage);
        bytes.copy_within(whole * 4..self.fill, 0);
        self.fill -= whole * 4;
    }
}

/// Broadcast hop: receives `buf` from `prev` (unless root) and forwards what has arrived to
/// `next` (unless the last rank of the chain).
struct RelayFlow<'a> {
    buf: &'a mut [u8],
    got: usize,
    sent: usize,
    forward: bool,
}

impl Flow for RelayFlow<'_> {
    fn send_left(&self) -> usize {
        if self.forward {
            self.buf.len() - self.sent
        } else {
            0
        }
    }
    fn send_buf(&self) -> &[u8] {
        if self.forward {
            &self.buf[self.sent..self.got]
        } else {
            &[]
        }
    }
    fn sent(&mut self, n: usize) {
        self.sent += n;
    }
    fn recv_left(&self) -> usize {
        self.buf.len() - self.got
    }
    fn recv_buf(&mut self) -> &mut [u8] {
        &mut self.buf[self.got..]
    }
    fn received(&mut self, n: usize) {
        self.got += n;
    }
}

// ---------------------------------------------------------------------------------------------
// The pump
// ---------------------------------------------------------------------------------------------

/// The two sockets of a rank in a ring of two or more.
struct Links {
    next: TcpStream,
    prev: TcpStream,
    next_rank: usize,
    prev_rank: usize,
}

/// One op in flight: the links it runs on, its identity for errors, and its header.
struct Run<'a> {
    links: &'a Links,
    ctx: Ctx,
    head: Head,
    world_size: usize,
}

/// Identifies the running op in errors.
#[derive(Clone, Copy)]
struct Ctx {
    op: &'static str,
    seq: u64,
    rank: usize,
    timeout: Duration,
}

impl Ctx {
    fn fail(&self, peer: Option<usize>, msg: String) -> Error {
        Error::Collective {
            op: self.op,
            seq: self.seq,
            rank: self.rank,
            peer,
            msg,
        }
    }

    fn closed(&self, peer: usize) -> Error {
        self.fail(Some(peer), closed_by(peer))
    }
}

/// Outcome of one nonblocking send or recv.
enum Io {
    Moved(usize),
    WouldBlock,
    /// End of stream, reset or broken pipe: the peer is gone.
    Closed,
}

fn classify(result: isize) -> io::Result<Io> {
    if result > 0 {
        return Ok(Io::Moved(result as usize));
    }
    if result == 0 {
        return Ok(Io::Closed);
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::Interrupted => Ok(Io::WouldBlock),
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
            Ok(Io::Closed)
        }
        _ => Err(e),
    }
}

fn send_some(fd: RawFd, buf: &[u8]) -> io::Result<Io> {
    // SAFETY: `buf` is a valid readable region of `buf.len()` bytes for the call's duration.
    // MSG_NOSIGNAL: a closed peer gives EPIPE instead of killing the process with SIGPIPE.
    let r = unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    classify(r)
}

fn recv_some(fd: RawFd, buf: &mut [u8]) -> io::Result<Io> {
    // SAFETY: `buf` is a valid writable region of `buf.len()` bytes for the call's duration.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    classify(r)
}

/// Runs one pass: writes the flow's bytes to `next` and reads its bytes from `prev` at the same
/// time. With `head_out` / `head_in` the op header goes first on that link (and the peer's is
/// checked against ours). Fails at once when a peer's socket closes, and after `ctx.timeout`
/// without any progress.
fn pump(run: &Run, head_out: bool, head_in: bool, flow: &mut impl Flow) -> Result<()> {
    let (links, ctx, head) = (run.links, &run.ctx, &run.head);
    let ours = head.encode();
    let mut theirs = [0u8; HEAD_LEN];
    let mut out_pos = if head_out { 0 } else { HEAD_LEN };
    let mut in_pos = if head_in { 0 } else { HEAD_LEN };
    let (next, prev) = (links.next.as_raw_fd(), links.prev.as_raw_fd());
    let other =
        |e: io::Error, peer: usize| ctx.fail(Some(peer), format!("socket to rank {peer}: {e}"));
    let mut last_progress = Instant::now();
    loop {
        let mut progress = false;
        // Write what can be written.
        let out = if out_pos < HEAD_LEN {
            &ours[out_pos..]
        } else {
            flow.send_buf()
        };
        if !out.is_empty() {
            match send_some(next, out).map_err(|e| other(e, links.next_rank))? {
                Io::Moved(n) => {
                    if out_pos < HEAD_LEN {
                        out_pos += n;
                    } else {
                        flow.sent(n);
                    }
                    progress = true;
                }
                Io::WouldBlock => {}
                Io::Closed => return Err(ctx.closed(links.next_rank)),
            }
        }
        // Read what has arrived.
        if in_pos < HEAD_LEN {
            match recv_some(prev, &mut theirs[in_pos..]).map_err(|e| other(e, links.prev_rank))? {
                Io::Moved(n) => {
                    in_pos += n;
                    progress = true;
                    if in_pos == HEAD_LEN {
                        check_head(ctx, links.prev_rank, head, &theirs)?;
                    }
                }
                Io::WouldBlock => {}
                Io::Closed => return Err(ctx.closed(links.prev_rank)),
            }
        } else if flow.recv_left() > 0 {
            match recv_some(prev, flow.recv_buf()).map_err(|e| other(e, links.prev_rank))? {
                Io::Moved(n) => {
                    flow.received(n);
                    progress = true;
                }
                Io::WouldBlock => {}
                Io::Closed => return Err(ctx.closed(links.prev_rank)),
            }
        }
        let sending = out_pos < HEAD_LEN || flow.send_left() > 0;
        let receiving = in_pos < HEAD_LEN || flow.recv_left() > 0;
        if !sending && !receiving {
            return Ok(());
        }
        let now = Instant::now();
        if progress {
            // Try again at once: more may be writable or readable without sleeping in poll.
            last_progress = now;
            continue;
        }
        // Nothing moved: sleep in poll until a socket is ready or the timeout expires.
        let waiting_for = if receiving {
            links.prev_rank
        } else {
            links.next_rank
        };
        let deadline = last_progress + ctx.timeout;
        if now >= deadline {
            return Err(ctx.fail(
                Some(waiting_for),
                format!(
                    "no progress from rank {waiting_for} for {} s (ddp.timeout_s)",
                    store::secs(ctx.timeout)
                ),
            ));
        }
        let can_send = out_pos < HEAD_LEN || !flow.send_buf().is_empty();
        let mut fds = [
            libc::pollfd {
                fd: if sending { next } else { -1 },
                // Waiting for relay data: still watch for the successor hanging up.
                events: if can_send {
                    libc::POLLOUT | libc::POLLRDHUP
                } else {
                    libc::POLLRDHUP
                },
                revents: 0,
            },
            libc::pollfd {
                fd: if receiving { prev } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let wait_ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, wait_ms) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(ctx.fail(None, format!("poll: {e}")));
            }
        }
        if sending && fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
            // The successor never writes on this socket: a hang-up or an error means it is gone.
            return Err(ctx.closed(links.next_rank));
        }
    }
}

/// Compares the predecessor's op header with ours.
fn check_head(ctx: &Ctx, peer: usize, ours: &Head, theirs: &[u8; HEAD_LEN]) -> Result<()> {
    match Head::decode(theirs) {
        Some(h) if h == *ours => Ok(()),
        Some(h) => Err(ctx.fail(
            Some(peer),
            format!(
                "rank {peer} is at {} but this rank is at {}; every rank must issue the same \
                 collectives in the same order with the same lengths",
                h.describe(),
                ours.describe()
            ),
        )),
        None => Err(ctx.fail(
            Some(peer),
            format!("rank {peer} sent bytes that are not an op header (the ring is out of step)"),
        )),
    }
}

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

/// The `i`-th of `w` nearly equal segments of `0..n` (sizes differ by at most one, may be 0).
pub(crate) fn segment(n: usize, w: usize, i: usize) -> Range<usize> {
    let at = |k: usize| ((n as u128 * k as u128) / w as u128) as usize;
    at(i)..at(i + 1)
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
}

impl TcpRing {
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
        store.set(&addr_key(rank), local.to_string().as_bytes())?;

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
        let next = connect_next(store, rank, world_size, next_rank, token, deadline, timeout);
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

/// The error message for a peer whose connection closed (shared with the shared-memory
/// transport, which watches the same sockets).
pub(crate) fn closed_by(peer: usize) -> String {
    format!("connection closed by rank {peer} (it exited or crashed; see its log)")
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

/// Connects to the successor's published address and authenticates.
fn connect_next(
    store: &mut StoreClient,
    rank: usize,
    world_size: usize,
    next_rank: usize,
    token: Option<&str>,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpStream> {
    let fail = |msg: String| Error::Rendezvous { rank, msg };
    let raw = store.get(&addr_key(next_rank), timeout)?;
    let addr: SocketAddr = std::str::from_utf8(&raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            fail(format!(
                "rank {next_rank} published a malformed ring address {raw:?}"
            ))
        })?;
    let mut delay = Duration::from_millis(10);
    let mut stream = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(10))) {
            Ok(s) => break s,
            Err(e) if Instant::now() + delay >= deadline => {
                return Err(fail(format!(
                    "could not connect to rank {next_rank}'s ring port {addr} within {} s: {e}",
                    store::secs(timeout)
                )));
            }
            Err(_) => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(200));
            }
        }
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(10));
    let io_fail = |e: io::Error| {
        fail(format!(
            "ring handshake with rank {next_rank} at {addr} failed: {e} (did rank {next_rank} exit?)"
        ))
    };
    stream.set_read_timeout(Some(left)).map_err(io_fail)?;
    match store::hello(&mut stream, rank, world_size, token, RING_PURPOSE).map_err(io_fail)? {
        Ok(()) => Ok(stream),
        Err(Refusal::BadToken) => Err(fail(format!(
            "rank {rank} was refused by rank {next_rank} at {addr}: wrong or missing DDP_TOKEN"
        ))),
        Err(other) => Err(fail(format!(
            "rank {next_rank} at {addr} refused the ring connection: {other}"
        ))),
    }
}

/// Accepts connections on the ring port until the predecessor arrives and authenticates;
/// strangers and wrong tokens are refused, logged and ignored.
fn accept_prev(
    listener: TcpListener,
    rank: usize,
    world_size: usize,
    prev_rank: usize,
    token: Option<&str>,
    deadline: Instant,
    cancel: &AtomicBool,
) -> std::result::Result<TcpStream, String> {
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("ring port {local}: {e}"))?;
    loop {
        let now = Instant::now();
        if cancel.load(Ordering::SeqCst) {
            return Err(format!(
                "ring setup abandoned while waiting for rank {prev_rank}"
            ));
        }
        if now >= deadline {
            return Err(format!(
                "rank {prev_rank} did not connect to this rank's ring port {local} in time (ddp.timeout_s)"
            ));
        }
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let slice = (deadline - now)
            .min(Duration::from_millis(100))
            .as_millis()
            .max(1) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, slice) };
        let (mut stream, peer) = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                continue;
            }
            Err(e) => return Err(format!("ring port {local}: accept failed: {e}")),
        };
        let log =
            |msg: &str| eprintln!("ddp ring rank {rank}: refused a connection from {peer}: {msg}");
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        if let Err(e) = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(left)))
        {
            log(&e.to_string());
            continue;
        }
        let greeting = match store::greet(&mut stream, token, RING_PURPOSE) {
            Ok(g) => g,
            Err(e) => {
                log(&format!("handshake failed: {e}"));
                continue;
            }
        };
        let refusal = if !greeting.authenticated {
            Some(Refusal::BadToken)
        } else if greeting.world_size as usize != world_size {
            Some(Refusal::WorldSize {
                server_world: world_size as u32,
            })
        } else if greeting.rank as usize != prev_rank {
            Some(Refusal::UnexpectedRank {
                expected: prev_rank as u32,
            })
        } else {
            None
        };
        let answer = refusal.map_or(Response::Welcome, Response::Refused);
        let sent = store::send_msg(&mut stream, answer.encode());
        match (refusal, sent) {
            (None, Ok(())) => return Ok(stream),
            (Some(Refusal::BadToken), _) => log("wrong or missing DDP_TOKEN"),
            (Some(r), _) => log(&format!(
                "claims rank {} of {}: {r}",
                greeting.rank, greeting.world_size
            )),
            (None, Err(e)) => log(&e.to_string()),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dist::store::StoreServer;
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
            let acceptor =
                s.spawn(|| accept_prev(listener, 1, 2, 0, Some("tok"), deadline, &cancel));
            let knock = |rank, token| {
                let mut stream = TcpStream::connect(addr).unwrap();
                store::hello(&mut stream, rank, 2, token, RING_PURPOSE).unwrap()
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
}
