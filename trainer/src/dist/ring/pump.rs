//! One pass of a collective: the poll(2) loop that writes to `next` and reads from `prev` at
//! the same time on nonblocking sockets ([`pump`]), and the [`Flow`]s that say where the bytes
//! of a pass come from and go to (copy, reduce into place, relay what just arrived).

use std::io::{self, ErrorKind};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::head::{HEAD_LEN, Head};
use crate::dist::codec::Codec;
use crate::dist::wire::secs;
use crate::{Error, Result};

/// The error message for a peer whose connection closed (shared with the shared-memory
/// transport, which watches the same sockets).
pub(crate) fn closed_by(peer: usize) -> String {
    format!("connection closed by rank {peer} (it exited or crashed; see its log)")
}

/// One pass of an op: bytes written to `next` and bytes read from `prev`, both counted exactly
/// (the streams carry consecutive ops back to back, so a pass never reads past its own bytes).
pub(super) trait Flow {
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
pub(super) struct CopyFlow<'a> {
    pub(super) src: &'a [u8],
    pub(super) sent: usize,
    pub(super) dst: &'a mut [u8],
    pub(super) got: usize,
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
pub(super) struct ReduceFlow<'a> {
    pub(super) src: &'a [u8],
    pub(super) sent: usize,
    pub(super) dst: &'a mut [f32],
    /// Floats of `dst` already reduced.
    pub(super) done: usize,
    pub(super) stage: &'a mut [f32],
    /// Bytes in `stage` not yet reduced (fewer than 4 after each `received`).
    pub(super) fill: usize,
    /// Bytes received so far.
    pub(super) got: usize,
    pub(super) scale: Option<f32>,
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

/// A reduce-scatter pass of a compressed all-reduce: sends `src` (the encoded partial sums of
/// one segment) while receiving the previous rank's encoded partial sums of another, which are
/// decoded and added into `dst` in f32 (then times `scale`).
pub(super) struct CodedReduceFlow<'a> {
    pub(super) src: &'a [u8],
    pub(super) sent: usize,
    pub(super) dst: &'a mut [f32],
    /// Floats of `dst` already reduced.
    pub(super) done: usize,
    pub(super) stage: &'a mut [u8],
    /// Bytes in `stage` not yet reduced (fewer than one value after each `received`).
    pub(super) fill: usize,
    pub(super) got: usize,
    pub(super) scale: Option<f32>,
    pub(super) codec: Codec,
}

impl Flow for CodedReduceFlow<'_> {
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
        self.dst.len() * Codec::WIDTH - self.got
    }
    fn recv_buf(&mut self) -> &mut [u8] {
        let left = self.recv_left();
        let end = self.stage.len().min(self.fill + left);
        &mut self.stage[self.fill..end]
    }
    fn received(&mut self, n: usize) {
        self.got += n;
        self.fill += n;
        let whole = self.fill / Codec::WIDTH;
        let bytes = whole * Codec::WIDTH;
        let dst = &mut self.dst[self.done..self.done + whole];
        self.codec.decode_add(&self.stage[..bytes], dst, self.scale);
        self.done += whole;
        self.stage.copy_within(bytes..self.fill, 0);
        self.fill -= bytes;
    }
}

/// Broadcast hop: receives `buf` from `prev` (unless root) and forwards what has arrived to
/// `next` (unless the last rank of the chain).
pub(super) struct RelayFlow<'a> {
    pub(super) buf: &'a mut [u8],
    pub(super) got: usize,
    pub(super) sent: usize,
    pub(super) forward: bool,
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
pub(super) struct Links {
    pub(super) next: TcpStream,
    pub(super) prev: TcpStream,
    pub(super) next_rank: usize,
    pub(super) prev_rank: usize,
}

/// One op in flight: the links it runs on, its identity for errors, and its header.
pub(super) struct Run<'a> {
    pub(super) links: &'a Links,
    pub(super) ctx: Ctx,
    pub(super) head: Head,
    pub(super) world_size: usize,
}

/// Identifies the running op in errors.
#[derive(Clone, Copy)]
pub(super) struct Ctx {
    pub(super) op: &'static str,
    pub(super) seq: u64,
    pub(super) rank: usize,
    pub(super) timeout: Duration,
}

impl Ctx {
    pub(super) fn fail(&self, peer: Option<usize>, msg: String) -> Error {
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
pub(super) enum Io {
    Moved(usize),
    WouldBlock,
    /// End of stream, reset or broken pipe: the peer is gone.
    Closed,
}

pub(super) fn classify(result: isize) -> io::Result<Io> {
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

pub(super) fn send_some(fd: RawFd, buf: &[u8]) -> io::Result<Io> {
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

pub(super) fn recv_some(fd: RawFd, buf: &mut [u8]) -> io::Result<Io> {
    // SAFETY: `buf` is a valid writable region of `buf.len()` bytes for the call's duration.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    classify(r)
}

/// Runs one pass: writes the flow's bytes to `next` and reads its bytes from `prev` at the same
/// time. With `head_out` / `head_in` the op header goes first on that link (and the peer's is
/// checked against ours). Fails at once when a peer's socket closes, and after `ctx.timeout`
/// without any progress.
pub(super) fn pump(run: &Run, head_out: bool, head_in: bool, flow: &mut impl Flow) -> Result<()> {
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
                    secs(ctx.timeout)
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
pub(super) fn check_head(
    ctx: &Ctx,
    peer: usize,
    ours: &Head,
    theirs: &[u8; HEAD_LEN],
) -> Result<()> {
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
