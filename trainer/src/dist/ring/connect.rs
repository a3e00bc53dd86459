//! Setting up a ring link: connecting to the next rank's published address, and accepting the
//! previous rank on this rank's port, each authenticated with the store's HMAC challenge.

use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::dist::handshake::{RING_PURPOSE, greet, hello};
use crate::dist::store::StoreClient;
use crate::dist::wire::{Refusal, Response, secs, send_msg};
use crate::{Error, Result};

/// Store key under which rank `r` of a group's `generation` (an elastic group's membership;
/// 0 for every other group) publishes its ring listener.
pub(super) fn addr_key(generation: u64, rank: usize) -> String {
    match generation {
        0 => format!("ring/{rank}/addr"),
        g => format!("ring/g{g}/{rank}/addr"),
    }
}

/// Connects to the successor's published address and authenticates.
#[allow(clippy::too_many_arguments)]
pub(super) fn connect_next(
    store: &mut StoreClient,
    generation: u64,
    rank: usize,
    world_size: usize,
    next_rank: usize,
    token: Option<&str>,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpStream> {
    let fail = |msg: String| Error::Rendezvous { rank, msg };
    let raw = store.get(&addr_key(generation, next_rank), timeout)?;
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
                    secs(timeout)
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
    match hello(&mut stream, rank, world_size, token, RING_PURPOSE).map_err(io_fail)? {
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
pub(super) fn accept_prev(
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
        let greeting = match greet(&mut stream, token, RING_PURPOSE) {
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
        let sent = send_msg(&mut stream, answer.encode());
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
