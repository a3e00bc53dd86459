//! The rendezvous store: a small TCP key-value server hosted by rank 0, and its client.
//!
//! Every rank connects a [`StoreClient`] to the [`StoreServer`] at `MASTER_ADDR:MASTER_PORT`,
//! says its rank and world size, answers an HMAC challenge when `DDP_TOKEN` is set, and then
//! exchanges small values (ring addresses, NCCL ids, digests) through `set` / `get` / `add`.
//! See `docs/collectives.md` for the protocol.
//!
//! Layout:
//! - wire format: length-prefixed frames, [`Request`] / [`Response`] parsed once at the edge;
//! - authentication: nonce + HMAC-SHA256 helpers, shared with the ring's links (`ring/connect.rs`);
//! - [`StoreServer`]: accept thread + one thread per connection over a shared map;
//! - [`StoreClient`]: connect with retries, handshake, synchronous request/response calls.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Error, Result};

// ---------------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------------

/// Largest frame accepted before the handshake completed (a Hello or an Auth is a few bytes).
const MAX_HANDSHAKE_FRAME: usize = 4 << 10;
/// Largest frame accepted from an authenticated peer (store values are small metadata).
const MAX_FRAME: usize = 256 << 20;
/// Length of the server's challenge nonce and of the HMAC-SHA256 answer.
const NONCE_LEN: usize = 32;
/// Domain separation for the HMAC answers, so an answer for one purpose is useless for another.
const STORE_PURPOSE: &[u8] = b"ddp-store-v1";

/// Writes one frame: a little-endian `u32` length, then the payload.
fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(ErrorKind::InvalidInput, "store message over 4 GiB"))?;
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(payload);
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame of at most `max` bytes. A clean end of stream is `UnexpectedEof`.
fn read_frame(r: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            ErrorKind::InvalidData,
            format!("message of {len} bytes exceeds the limit of {max} bytes"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(payload)
}

/// Why a server (or a ring neighbour) refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The HMAC answer did not match: wrong or missing `DDP_TOKEN`.
    BadToken,
    /// The client's world size differs from the server's (`server_world`).
    WorldSize { server_world: u32 },
    /// The rank is not below the world size.
    RankOutOfRange,
    /// Another live connection already uses this rank.
    DuplicateRank,
    /// A ring listener expected its predecessor `expected` and got someone else.
    UnexpectedRank { expected: u32 },
}

/// A message from a client to the store (or from a ring rank to its successor, handshake only).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Request {
    Hello { rank: u32, world_size: u32 },
    Auth { tag: Vec<u8> },
    Set { key: String, value: Vec<u8> },
    Get { key: String, wait_ms: u64 },
    Add { key: String, delta: i64 },
    WaitJoined { wait_ms: u64 },
}

/// A message from the store to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Response {
    Challenge {
        nonce: [u8; NONCE_LEN],
    },
    Welcome,
    Refused(Refusal),
    Done,
    Value(Vec<u8>),
    /// `Get` waited its full time and the key never appeared.
    Missing,
    Counter(i64),
    /// Answer to `WaitJoined`: the ranks that never completed the handshake (empty: all joined).
    Joined {
        missing: Vec<u32>,
    },
    /// The request was understood but cannot be served (e.g. `add` on a non-counter value).
    Failed(String),
}

/// Append-only encoder for message fields.
struct Enc(Vec<u8>);

impl Enc {
    fn new(tag: u8) -> Self {
        Enc(vec![tag])
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, v: &[u8]) -> Self {
        // Frames are capped far below 4 GiB, so a field always fits a u32 length.
        self = self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
}

/// Cursor over a received message; every read checks the remaining length.
struct Dec<'a> {
    buf: &'a [u8],
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.buf.len() < n {
            return Err("truncated message".into());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| "key is not UTF-8".to_string())
    }
    fn end(self) -> Result<(), String> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes", self.buf.len()))
        }
    }
}

impl Request {
    fn encode(&self) -> Vec<u8> {
        match self {
            Request::Hello { rank, world_size } => Enc::new(1).u32(*rank).u32(*world_size),
            Request::Auth { tag } => Enc::new(2).bytes(tag),
            Request::Set { key, value } => Enc::new(3).bytes(key.as_bytes()).bytes(value),
            Request::Get { key, wait_ms } => Enc::new(4).bytes(key.as_bytes()).u64(*wait_ms),
            Request::Add { key, delta } => Enc::new(5).bytes(key.as_bytes()).u64(*delta as u64),
            Request::WaitJoined { wait_ms } => Enc::new(6).u64(*wait_ms),
        }
        .0
    }

    fn decode(buf: &[u8]) -> Result<Request, String> {
        let mut d = Dec { buf };
        let req = match d.u8()? {
            1 => Request::Hello {
                rank: d.u32()?,
                world_size: d.u32()?,
            },
            2 => Request::Auth { tag: d.bytes()? },
            3 => Request::Set {
                key: d.string()?,
                value: d.bytes()?,
            },
            4 => Request::Get {
                key: d.string()?,
                wait_ms: d.u64()?,
            },
            5 => Request::Add {
                key: d.string()?,
                delta: d.u64()? as i64,
            },
            6 => Request::WaitJoined { wait_ms: d.u64()? },
            tag => return Err(format!("unknown request type {tag}")),
        };
        d.end()?;
        Ok(req)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::BadToken => write!(f, "wrong or missing DDP_TOKEN"),
            Refusal::WorldSize { server_world } => write!(f, "its WORLD_SIZE is {server_world}"),
            Refusal::RankOutOfRange => write!(f, "rank out of range"),
            Refusal::DuplicateRank => write!(f, "rank already connected"),
            Refusal::UnexpectedRank { expected } => write!(f, "it expected rank {expected}"),
        }
    }
}

impl Response {
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Response::Challenge { nonce } => Enc::new(1).bytes(nonce),
            Response::Welcome => Enc::new(2),
            Response::Refused(r) => match r {
                Refusal::BadToken => Enc::new(3).u32(1),
                Refusal::WorldSize { server_world } => Enc::new(3).u32(2).u32(*server_world),
                Refusal::RankOutOfRange => Enc::new(3).u32(3),
                Refusal::DuplicateRank => Enc::new(3).u32(4),
                Refusal::UnexpectedRank { expected } => Enc::new(3).u32(5).u32(*expected),
            },
            Response::Done => Enc::new(4),
            Response::Value(v) => Enc::new(5).bytes(v),
            Response::Missing => Enc::new(6),
            Response::Counter(v) => Enc::new(7).u64(*v as u64),
            Response::Joined { missing } => missing
                .iter()
                .fold(Enc::new(8).u32(missing.len() as u32), |e, r| e.u32(*r)),
            Response::Failed(msg) => Enc::new(9).bytes(msg.as_bytes()),
        }
        .0
    }

    fn decode(buf: &[u8]) -> Result<Response, String> {
        let mut d = Dec { buf };
        let resp = match d.u8()? {
            1 => {
                let nonce = d.bytes()?;
                let nonce = nonce
                    .try_into()
                    .map_err(|_| "challenge nonce has the wrong length")?;
                Response::Challenge { nonce }
            }
            2 => Response::Welcome,
            3 => Response::Refused(match d.u32()? {
                1 => Refusal::BadToken,
                2 => Refusal::WorldSize {
                    server_world: d.u32()?,
                },
                3 => Refusal::RankOutOfRange,
                4 => Refusal::DuplicateRank,
                5 => Refusal::UnexpectedRank { expected: d.u32()? },
                code => return Err(format!("unknown refusal code {code}")),
            }),
            4 => Response::Done,
            5 => Response::Value(d.bytes()?),
            6 => Response::Missing,
            7 => Response::Counter(d.u64()? as i64),
            8 => {
                let n = d.u32()? as usize;
                let missing = (0..n).map(|_| d.u32()).collect::<Result<Vec<_>, _>>()?;
                Response::Joined { missing }
            }
            9 => Response::Failed(String::from_utf8_lossy(&d.bytes()?).into_owned()),
            tag => return Err(format!("unknown response type {tag}")),
        };
        d.end()?;
        Ok(resp)
    }
}

pub(crate) fn send_msg(stream: &mut TcpStream, payload: Vec<u8>) -> io::Result<()> {
    write_frame(stream, &payload)
}

fn bad_data(msg: String) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, msg)
}

fn recv_request(stream: &mut TcpStream, max: usize) -> io::Result<Request> {
    Request::decode(&read_frame(stream, max)?).map_err(bad_data)
}

pub(crate) fn recv_response(stream: &mut TcpStream, max: usize) -> io::Result<Response> {
    Response::decode(&read_frame(stream, max)?).map_err(bad_data)
}

// ---------------------------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------------------------

/// A fresh random challenge.
fn new_nonce() -> io::Result<[u8; NONCE_LEN]> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| io::Error::other(format!("getrandom: {e}")))?;
    Ok(nonce)
}

fn mac(token: &str, purpose: &[u8], nonce: &[u8], rank: u32) -> Hmac<Sha256> {
    // HMAC accepts keys of any length, so this never fails.
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes()).expect("HMAC takes any key");
    mac.update(purpose);
    mac.update(nonce);
    mac.update(&rank.to_le_bytes());
    mac
}

/// The answer to a challenge: HMAC-SHA256(token, purpose ‖ nonce ‖ rank).
fn auth_tag(token: &str, purpose: &[u8], nonce: &[u8], rank: u32) -> Vec<u8> {
    mac(token, purpose, nonce, rank)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// Constant-time check of a challenge answer.
fn auth_ok(token: &str, purpose: &[u8], nonce: &[u8], rank: u32, tag: &[u8]) -> bool {
    mac(token, purpose, nonce, rank).verify_slice(tag).is_ok()
}

/// What the accepting side learned from a connecting peer's Hello (and Auth, with a token).
pub(crate) struct Greeting {
    pub rank: u32,
    pub world_size: u32,
    /// False when a token is configured and the peer's answer was wrong or missing.
    pub authenticated: bool,
}

/// Accepting side of the handshake: reads Hello and, when `token` is set, challenges the peer.
/// The caller then answers `Welcome` or `Refused`.
pub(crate) fn greet(
    stream: &mut TcpStream,
    token: Option<&str>,
    purpose: &[u8],
) -> io::Result<Greeting> {
    let Request::Hello { rank, world_size } = recv_request(stream, MAX_HANDSHAKE_FRAME)? else {
        return Err(bad_data("expected a Hello message".into()));
    };
    let mut authenticated = true;
    if let Some(token) = token {
        let nonce = new_nonce()?;
        send_msg(stream, Response::Challenge { nonce }.encode())?;
        let Request::Auth { tag } = recv_request(stream, MAX_HANDSHAKE_FRAME)? else {
            return Err(bad_data("expected an Auth message".into()));
        };
        authenticated = auth_ok(token, purpose, &nonce, rank, &tag);
    }
    Ok(Greeting {
        rank,
        world_size,
        authenticated,
    })
}

/// Connecting side of the handshake: Hello, the answer to a challenge, then Welcome or a refusal.
pub(crate) fn hello(
    stream: &mut TcpStream,
    rank: usize,
    world_size: usize,
    token: Option<&str>,
    purpose: &[u8],
) -> io::Result<Result<(), Refusal>> {
    let rank = rank as u32;
    send_msg(
        stream,
        Request::Hello {
            rank,
            world_size: world_size as u32,
        }
        .encode(),
    )?;
    let mut resp = recv_response(stream, MAX_HANDSHAKE_FRAME)?;
    if let Response::Challenge { nonce } = resp {
        // Without a token the answer is empty, which the server refuses as a missing token.
        let tag = token
            .map(|t| auth_tag(t, purpose, &nonce, rank))
            .unwrap_or_default();
        send_msg(stream, Request::Auth { tag }.encode())?;
        resp = recv_response(stream, MAX_HANDSHAKE_FRAME)?;
    }
    match resp {
        Response::Welcome => Ok(Ok(())),
        Response::Refused(r) => Ok(Err(r)),
        other => Err(bad_data(format!("unexpected handshake answer {other:?}"))),
    }
}

/// Seconds for messages: "30" for whole seconds, "1.5" otherwise.
pub(crate) fn secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

/// The store server, hosted by rank 0. Serves until [`StoreServer::shutdown`] or drop.
pub struct StoreServer {
    local: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// `MASTER_ADDR:MASTER_PORT` as given, for log lines.
    shown: String,
    world_size: usize,
    token: Option<String>,
    stop: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    kv: HashMap<String, Vec<u8>>,
    /// Ranks that completed the handshake at least once.
    joined: Vec<bool>,
    /// Ranks with a live connection (a second connection with the same rank is refused).
    live: Vec<bool>,
    /// Clones of the live connections, shut down when the server stops.
    conns: Vec<(u64, TcpStream)>,
    next_conn: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not take the whole store down.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits on the condition variable until `done` holds, the deadline passes or the server stops.
    fn wait_until<'a>(
        &self,
        mut state: MutexGuard<'a, State>,
        deadline: Instant,
        mut done: impl FnMut(&State) -> bool,
    ) -> MutexGuard<'a, State> {
        while !done(&state) && !self.stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Short slices so a stop request is noticed even without a notification.
            let slice = (deadline - now).min(Duration::from_millis(200));
            state = self
                .changed
                .wait_timeout(state, slice)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state
    }
}

impl StoreServer {
    /// Listens on `addr:port` and serves `world_size` ranks in a background thread.
    ///
    /// A loopback `addr` is bound as is; any other address binds every interface of its family
    /// (like torch's TCPStore), so ranks on other hosts reach it whatever name resolves to.
    /// Port 0 picks a free port ([`StoreServer::port`]).
    pub fn bind(
        addr: &str,
        port: u16,
        world_size: usize,
        token: Option<String>,
    ) -> Result<StoreServer> {
        let shown = format!("{addr}:{port}");
        let fail = |msg: String| Error::Rendezvous { rank: 0, msg };
        let resolved = (addr, port)
            .to_socket_addrs()
            .map_err(|e| fail(format!("cannot resolve MASTER_ADDR '{addr}': {e}")))?
            .next()
            .ok_or_else(|| fail(format!("MASTER_ADDR '{addr}' resolves to no address")))?;
        let bind_to = match resolved.ip() {
            ip if ip.is_loopback() => resolved,
            IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
        };
        let listener = TcpListener::bind(bind_to).map_err(|e| {
            fail(match e.kind() {
                ErrorKind::AddrInUse => format!(
                    "MASTER_ADDR:MASTER_PORT {shown} is already in use; pick another MASTER_PORT \
                     or stop the process holding it"
                ),
                ErrorKind::AddrNotAvailable => format!(
                    "MASTER_ADDR {addr} is not an address of this host; rank 0 hosts the store \
                     and must run on MASTER_ADDR"
                ),
                _ => format!("cannot listen on MASTER_ADDR:MASTER_PORT {shown}: {e}"),
            })
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| fail(format!("store socket {shown}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| fail(format!("store socket {shown}: {e}")))?;
        let shared = Arc::new(Shared {
            shown,
            world_size,
            token: token.filter(|t| !t.is_empty()),
            stop: AtomicBool::new(false),
            state: Mutex::new(State {
                joined: vec![false; world_size],
                live: vec![false; world_size],
                ..State::default()
            }),
            changed: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let accept_thread = std::thread::Builder::new()
            .name("ddp-store".into())
            .spawn(move || accept_loop(listener, thread_shared))
            .map_err(|e| fail(format!("cannot start the store thread: {e}")))?;
        Ok(StoreServer {
            local,
            shared,
            accept_thread: Some(accept_thread),
        })
    }

    /// The port actually bound (useful with port 0).
    pub fn port(&self) -> u16 {
        self.local.port()
    }

    /// The socket address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops serving: closes every connection and joins the server threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        if let Some(thread) = self.accept_thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for StoreServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreServer")
            .field("local", &self.local)
            .field("world_size", &self.shared.world_size)
            .field("token", &self.shared.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, the listener outlives the call.
        unsafe { libc::poll(&mut pfd, 1, 100) };
        match listener.accept() {
            Ok((stream, peer)) => {
                let conn_shared = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name("ddp-store-conn".into())
                    .spawn(move || serve_connection(stream, peer, &conn_shared));
                match spawned {
                    Ok(handle) => workers.push(handle),
                    Err(e) => eprintln!("ddp store {}: cannot serve {peer}: {e}", shared.shown),
                }
                workers.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("ddp store {}: accept failed: {e}", shared.shown);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    // Unblock the connection threads waiting in a read, then wait for them.
    for (_, conn) in shared.lock().conns.drain(..) {
        let _ = conn.shutdown(std::net::Shutdown::Both);
    }
    for handle in workers {
        let _ = handle.join();
    }
}

fn serve_connection(mut stream: TcpStream, peer: SocketAddr, shared: &Shared) {
    // Registered before the handshake so that a stopping server can unblock every read. The
    // stop flag is checked under the lock that the final drain takes too.
    let conn_id = {
        let mut state = shared.lock();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(clone) = stream.try_clone() else {
            return;
        };
        let id = state.next_conn;
        state.next_conn += 1;
        state.conns.push((id, clone));
        id
    };
    if let Some(rank) = admit(&mut stream, peer, shared) {
        serve_requests(&mut stream, peer, rank, shared);
        shared.lock().live[rank] = false;
    }
    shared.lock().conns.retain(|(id, _)| *id != conn_id);
}

fn log_conn(shared: &Shared, peer: SocketAddr, msg: &str) {
    eprintln!("ddp store {}: connection from {peer}: {msg}", shared.shown);
}

/// The server side of the handshake. Returns the rank once it was welcomed; refusals are logged
/// and answered, never fatal to the server.
fn admit(stream: &mut TcpStream, peer: SocketAddr, shared: &Shared) -> Option<usize> {
    let _ = stream.set_nodelay(true);
    // A silent or slow peer must not hold a half-open handshake forever.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let greeting = match greet(stream, shared.token.as_deref(), STORE_PURPOSE) {
        Ok(g) => g,
        Err(e) => {
            log_conn(shared, peer, &format!("handshake failed: {e}"));
            return None;
        }
    };
    let (rank, world) = (greeting.rank as usize, shared.world_size);
    let mut state = shared.lock();
    let refusal = if !greeting.authenticated {
        Some(Refusal::BadToken)
    } else if greeting.world_size as usize != world {
        Some(Refusal::WorldSize {
            server_world: world as u32,
        })
    } else if rank >= world {
        Some(Refusal::RankOutOfRange)
    } else if state.live[rank] {
        Some(Refusal::DuplicateRank)
    } else {
        None
    };
    if let Some(refusal) = refusal {
        drop(state);
        let why = match refusal {
            Refusal::BadToken => "wrong or missing DDP_TOKEN".to_string(),
            Refusal::WorldSize { .. } => {
                format!(
                    "it says WORLD_SIZE={} but this store has WORLD_SIZE={world}",
                    greeting.world_size
                )
            }
            Refusal::RankOutOfRange => {
                format!("rank {rank} is out of range for WORLD_SIZE={world}")
            }
            Refusal::DuplicateRank => format!("rank {rank} is already connected"),
            Refusal::UnexpectedRank { .. } => "unexpected rank".to_string(),
        };
        log_conn(
            shared,
            peer,
            &format!("refused (claims rank {rank}): {why}"),
        );
        let _ = send_msg(stream, Response::Refused(refusal).encode());
        return None;
    }
    state.live[rank] = true;
    state.joined[rank] = true;
    drop(state);
    shared.changed.notify_all();
    if send_msg(stream, Response::Welcome.encode()).is_err()
        || stream.set_read_timeout(None).is_err()
    {
        shared.lock().live[rank] = false;
        return None;
    }
    Some(rank)
}

/// Answers requests until the client disconnects or the server stops.
fn serve_requests(stream: &mut TcpStream, peer: SocketAddr, rank: usize, shared: &Shared) {
    loop {
        let request = match recv_request(stream, MAX_FRAME) {
            Ok(req) => req,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
                ) =>
            {
                return;
            }
            Err(e) => {
                if !shared.stop.load(Ordering::SeqCst) {
                    log_conn(
                        shared,
                        peer,
                        &format!("rank {rank}: bad request, closing: {e}"),
                    );
                }
                return;
            }
        };
        if send_msg(stream, handle(shared, request).encode()).is_err() {
            return;
        }
    }
}

fn handle(shared: &Shared, request: Request) -> Response {
    match request {
        Request::Set { key, value } => {
            shared.lock().kv.insert(key, value);
            shared.changed.notify_all();
            Response::Done
        }
        Request::Get { key, wait_ms } => {
            let deadline = Instant::now() + Duration::from_millis(wait_ms);
            let state = shared.wait_until(shared.lock(), deadline, |s| s.kv.contains_key(&key));
            match state.kv.get(&key) {
                Some(v) => Response::Value(v.clone()),
                None => Response::Missing,
            }
        }
        Request::Add { key, delta } => {
            let mut state = shared.lock();
            let current = match state.kv.get(&key) {
                None => 0,
                Some(v) => match <[u8; 8]>::try_from(v.as_slice()) {
                    Ok(bytes) => i64::from_le_bytes(bytes),
                    Err(_) => {
                        return Response::Failed(format!(
                            "key '{key}' holds {} bytes, not a counter",
                            v.len()
                        ));
                    }
                },
            };
            let value = current.wrapping_add(delta);
            state.kv.insert(key, value.to_le_bytes().to_vec());
            drop(state);
            shared.changed.notify_all();
            Response::Counter(value)
        }
        Request::WaitJoined { wait_ms } => {
            let deadline = Instant::now() + Duration::from_millis(wait_ms);
            let state = shared.wait_until(shared.lock(), deadline, |s| s.joined.iter().all(|&j| j));
            let missing = (0..shared.world_size)
                .filter(|&r| !state.joined[r])
                .map(|r| r as u32)
                .collect();
            Response::Joined { missing }
        }
        Request::Hello { .. } | Request::Auth { .. } => {
            Response::Failed("already connected".into())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

/// One rank's connection to the store. Calls are synchronous request/response round trips.
#[derive(Debug)]
pub struct StoreClient {
    stream: TcpStream,
    /// `ADDR:PORT` as given, for messages.
    shown: String,
    rank: usize,
    world_size: usize,
    /// How long a call waits for its answer beyond the time the server itself may wait.
    timeout: Duration,
}

impl StoreClient {
    /// Connects to the store at `addr:port`, retrying until `timeout` (rank 0 may start later),
    /// and completes the handshake: rank, world size and, with a token, the HMAC challenge.
    pub fn connect(
        addr: &str,
        port: u16,
        rank: usize,
        world_size: usize,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<StoreClient> {
        let shown = format!("{addr}:{port}");
        let fail = |msg: String| Error::Rendezvous { rank, msg };
        if rank >= world_size {
            return Err(fail(format!(
                "RANK={rank} is out of range for WORLD_SIZE={world_size}"
            )));
        }
        let token = token.filter(|t| !t.is_empty());
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(20);
        let mut last_error;
        loop {
            match Self::try_connect(addr, port, rank, world_size, token, deadline) {
                Ok(Ok(stream)) => {
                    return Ok(StoreClient {
                        stream,
                        shown,
                        rank,
                        world_size,
                        timeout,
                    });
                }
                Ok(Err(refusal)) => {
                    return Err(fail(match refusal {
                        Refusal::BadToken => {
                            format!(
                                "rank {rank} was refused by the store at {shown}: wrong or missing DDP_TOKEN"
                            )
                        }
                        Refusal::WorldSize { server_world } => {
                            format!(
                                "rank {rank} says WORLD_SIZE={world_size} but rank 0 has WORLD_SIZE={server_world}"
                            )
                        }
                        Refusal::RankOutOfRange => {
                            format!(
                                "rank {rank} is out of range for the WORLD_SIZE of the store at {shown}"
                            )
                        }
                        Refusal::DuplicateRank => format!(
                            "rank {rank} is already connected to the store at {shown} \
                             (were two processes started with RANK={rank}?)"
                        ),
                        Refusal::UnexpectedRank { expected } => {
                            format!("the store at {shown} expected rank {expected}")
                        }
                    }));
                }
                Err(e) => last_error = e,
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(fail(format!(
                    "rank {rank} could not reach the store at {shown} after {} s (is rank 0 running? \
                     MASTER_ADDR/MASTER_PORT); last error: {last_error}",
                    secs(timeout)
                )));
            }
            std::thread::sleep(delay.min(deadline - now));
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    /// One connection attempt: `Ok(Err(_))` is a refusal (final), `Err(_)` may be retried.
    fn try_connect(
        addr: &str,
        port: u16,
        rank: usize,
        world_size: usize,
        token: Option<&str>,
        deadline: Instant,
    ) -> io::Result<Result<TcpStream, Refusal>> {
        let mut last = io::Error::new(
            ErrorKind::NotFound,
            format!("'{addr}' resolves to no address"),
        );
        for sa in (addr, port).to_socket_addrs()? {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            let mut stream = match TcpStream::connect_timeout(&sa, left.min(Duration::from_secs(5)))
            {
                Ok(s) => s,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(left))?;
            return Ok(hello(&mut stream, rank, world_size, token, STORE_PURPOSE)?.map(|()| stream));
        }
        Err(last)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The local address of the connection: the IP this rank uses to reach `MASTER_ADDR`.
    pub fn local_ip(&self) -> Result<IpAddr> {
        self.stream
            .local_addr()
            .map(|a| a.ip())
            .map_err(|e| self.fail(format!("store socket: {e}")))
    }

    fn fail(&self, msg: String) -> Error {
        Error::Rendezvous {
            rank: self.rank,
            msg,
        }
    }

    /// One round trip; `wait` is how long the server may take before answering.
    fn call(&mut self, request: Request, wait: Duration, what: &str) -> Result<Response> {
        let patience = wait + self.timeout;
        let io_fail = |e: io::Error, shown: &str| match e.kind() {
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
                format!(
                    "{what}: the store at {shown} closed the connection (rank 0 exited or crashed; see its log)"
                )
            }
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                format!(
                    "{what}: the store at {shown} did not answer within {} s",
                    secs(patience)
                )
            }
            _ => format!("{what}: store at {shown}: {e}"),
        };
        self.stream
            .set_read_timeout(Some(patience))
            .and_then(|()| send_msg(&mut self.stream, request.encode()))
            .and_then(|()| recv_response(&mut self.stream, MAX_FRAME))
            .map_err(|e| self.fail(io_fail(e, &self.shown)))
            .and_then(|resp| match resp {
                Response::Failed(msg) => Err(self.fail(format!(
                    "{what}: the store at {} refused: {msg}",
                    self.shown
                ))),
                other => Ok(other),
            })
    }

    fn unexpected(&self, what: &str, resp: Response) -> Error {
        self.fail(format!(
            "{what}: unexpected answer from the store at {}: {resp:?}",
            self.shown
        ))
    }

    /// Stores `value` under `key`, replacing any previous value.
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let what = format!("set '{key}'");
        match self.call(
            Request::Set {
                key: key.into(),
                value: value.to_vec(),
            },
            Duration::ZERO,
            &what,
        )? {
            Response::Done => Ok(()),
            other => Err(self.unexpected(&what, other)),
        }
    }

    /// The value of `key`, waiting up to `timeout` for another rank to set it.
    pub fn get(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let what = format!("get '{key}'");
        match self.call(
            Request::Get {
                key: key.into(),
                wait_ms: millis(timeout),
            },
            timeout,
            &what,
        )? {
            Response::Value(v) => Ok(v),
            Response::Missing => Err(self.fail(format!(
                "key '{key}' did not appear in the store at {} within {} s (ddp.timeout_s)",
                self.shown,
                secs(timeout)
            ))),
            other => Err(self.unexpected(&what, other)),
        }
    }

    /// Adds `delta` to the counter at `key` (missing counts as 0) and returns the new value.
    /// Counters are stored as 8 little-endian bytes.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64> {
        let what = format!("add '{key}'");
        match self.call(
            Request::Add {
                key: key.into(),
                delta,
            },
            Duration::ZERO,
            &what,
        )? {
            Response::Counter(v) => Ok(v),
            other => Err(self.unexpected(&what, other)),
        }
    }

    /// Waits until every rank completed its handshake with the store; the error names the
    /// ranks that never came.
    pub fn wait_all_joined(&mut self, timeout: Duration) -> Result<()> {
        let what = "wait for all ranks";
        match self.call(
            Request::WaitJoined {
                wait_ms: millis(timeout),
            },
            timeout,
            what,
        )? {
            Response::Joined { missing } if missing.is_empty() => Ok(()),
            Response::Joined { missing } => {
                let who = match missing.as_slice() {
                    [one] => format!("rank {one}"),
                    many => format!("ranks {many:?}"),
                };
                Err(self.fail(format!(
                    "{who} never joined within {} s (were all {} ranks started with the same \
                     MASTER_ADDR/MASTER_PORT {}?)",
                    secs(timeout),
                    self.world_size,
                    self.shown
                )))
            }
            other => Err(self.unexpected(what, other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    fn server(world: usize, token: Option<&str>) -> StoreServer {
        StoreServer::bind("127.0.0.1", 0, world, token.map(String::from)).unwrap()
    }

    fn client(
        s: &StoreServer,
        rank: usize,
        world: usize,
        token: Option<&str>,
    ) -> Result<StoreClient> {
        StoreClient::connect("127.0.0.1", s.port(), rank, world, token, T)
    }

    fn rendezvous_msg(r: Result<impl std::fmt::Debug>) -> (usize, String) {
        match r {
            Err(Error::Rendezvous { rank, msg }) => (rank, msg),
            other => panic!("expected a rendezvous error, got {other:?}"),
        }
    }

    #[test]
    fn messages_round_trip() {
        let requests = [
            Request::Hello {
                rank: 3,
                world_size: 8,
            },
            Request::Auth { tag: vec![1, 2, 3] },
            Request::Set {
                key: "k".into(),
                value: vec![0, 255],
            },
            Request::Get {
                key: "ring/1".into(),
                wait_ms: 1234,
            },
            Request::Add {
                key: "c".into(),
                delta: -5,
            },
            Request::WaitJoined { wait_ms: 7 },
        ];
        for r in requests {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        let responses = [
            Response::Challenge {
                nonce: [7; NONCE_LEN],
            },
            Response::Welcome,
            Response::Refused(Refusal::BadToken),
            Response::Refused(Refusal::WorldSize { server_world: 2 }),
            Response::Refused(Refusal::RankOutOfRange),
            Response::Refused(Refusal::DuplicateRank),
            Response::Refused(Refusal::UnexpectedRank { expected: 4 }),
            Response::Done,
            Response::Value(vec![9; 10]),
            Response::Missing,
            Response::Counter(-42),
            Response::Joined {
                missing: vec![1, 3],
            },
            Response::Failed("nope".into()),
        ];
        for r in responses {
            assert_eq!(Response::decode(&r.encode()).unwrap(), r);
        }
        assert_eq!(
            Request::decode(&[99]),
            Err("unknown request type 99".into())
        );
        assert_eq!(Request::decode(&[4, 1, 0]), Err("truncated message".into()));
        assert_eq!(
            Response::decode(&[2, 0]),
            Err("1 unexpected trailing bytes".into())
        );
    }

    #[test]
    fn frames_over_the_limit_are_rejected() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &[0u8; 100]).unwrap();
        assert_eq!(read_frame(&mut buf.as_slice(), 100).unwrap().len(), 100);
        let err = read_frame(&mut buf.as_slice(), 99).unwrap_err();
        assert_eq!(
            err.to_string(),
            "message of 100 bytes exceeds the limit of 99 bytes"
        );
    }

    #[test]
    fn hmac_answers_depend_on_token_purpose_nonce_and_rank() {
        let tag = auth_tag("secret", STORE_PURPOSE, &[1; 32], 2);
        assert_eq!(tag.len(), 32);
        assert!(auth_ok("secret", STORE_PURPOSE, &[1; 32], 2, &tag));
        assert!(!auth_ok("Secret", STORE_PURPOSE, &[1; 32], 2, &tag));
        assert!(!auth_ok("secret", b"other", &[1; 32], 2, &tag));
        assert!(!auth_ok("secret", STORE_PURPOSE, &[2; 32], 2, &tag));
        assert!(!auth_ok("secret", STORE_PURPOSE, &[1; 32], 3, &tag));
        assert!(!auth_ok("secret", STORE_PURPOSE, &[1; 32], 2, &[]));
        assert_eq!(secs(Duration::from_secs(30)), "30");
        assert_eq!(secs(Duration::from_millis(1500)), "1.5");
    }

    #[test]
    fn set_get_add_between_ranks() {
        let s = server(2, None);
        let mut c0 = client(&s, 0, 2, None).unwrap();
        let mut c1 = client(&s, 1, 2, None).unwrap();
        c0.set("a", b"hello").unwrap();
        assert_eq!(c1.get("a", T).unwrap(), b"hello");
        c1.set("a", b"").unwrap();
        assert_eq!(c0.get("a", T).unwrap(), b"");
        assert_eq!(c0.add("n", 5).unwrap(), 5);
        assert_eq!(c1.add("n", -7).unwrap(), -2);
        assert_eq!(c0.get("n", T).unwrap(), (-2i64).to_le_bytes());
        let (rank, msg) = rendezvous_msg(c1.add("a", 1));
        assert_eq!(rank, 1);
        assert!(
            msg.contains("key 'a' holds 0 bytes, not a counter"),
            "{msg}"
        );
        c0.wait_all_joined(T).unwrap();
        c1.wait_all_joined(T).unwrap();
        assert_eq!(c0.local_ip().unwrap(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn get_blocks_until_another_rank_sets_the_key() {
        let s = server(2, None);
        let mut c0 = client(&s, 0, 2, None).unwrap();
        let mut c1 = client(&s, 1, 2, None).unwrap();
        let t0 = Instant::now();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            c1.set("late", &[42]).unwrap();
        });
        assert_eq!(c0.get("late", T).unwrap(), [42]);
        assert!(t0.elapsed() >= Duration::from_millis(190));
        setter.join().unwrap();
    }

    #[test]
    fn get_timeout_names_the_key() {
        let s = server(1, None);
        let mut c = client(&s, 0, 1, None).unwrap();
        let t0 = Instant::now();
        let (rank, msg) = rendezvous_msg(c.get("ring/3/addr", Duration::from_millis(300)));
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert_eq!(rank, 0);
        assert_eq!(
            msg,
            format!(
                "key 'ring/3/addr' did not appear in the store at 127.0.0.1:{} within 0.3 s (ddp.timeout_s)",
                s.port()
            )
        );
    }

    #[test]
    fn missing_ranks_are_named() {
        let s = server(4, None);
        let mut c0 = client(&s, 0, 4, None).unwrap();
        let _c2 = client(&s, 2, 4, None).unwrap();
        let (_, msg) = rendezvous_msg(c0.wait_all_joined(Duration::from_millis(300)));
        assert!(
            msg.starts_with("ranks [1, 3] never joined within 0.3 s"),
            "{msg}"
        );
        let _c1 = client(&s, 1, 4, None).unwrap();
        let (_, msg) = rendezvous_msg(c0.wait_all_joined(Duration::from_millis(300)));
        assert!(msg.starts_with("rank 3 never joined within 0.3 s"), "{msg}");
    }

    #[test]
    fn token_is_checked() {
        let s = server(3, Some("right"));
        client(&s, 0, 3, Some("right")).unwrap();
        let (rank, msg) = rendezvous_msg(client(&s, 1, 3, Some("wrong")));
        assert_eq!(rank, 1);
        assert_eq!(
            msg,
            format!(
                "rank 1 was refused by the store at 127.0.0.1:{}: wrong or missing DDP_TOKEN",
                s.port()
            )
        );
        let (rank, msg) = rendezvous_msg(client(&s, 2, 3, None));
        assert_eq!(rank, 2);
        assert!(msg.ends_with("wrong or missing DDP_TOKEN"), "{msg}");
        // The server survived both and still serves the right token.
        let mut c1 = client(&s, 1, 3, Some("right")).unwrap();
        c1.set("x", b"1").unwrap();
    }

    #[test]
    fn garbage_connections_do_not_hurt_the_server() {
        let s = server(1, Some("t"));
        let mut raw = TcpStream::connect(s.local_addr()).unwrap();
        raw.write_all(&[255, 255, 255, 255, 1, 2, 3]).unwrap();
        drop(raw);
        let mut raw = TcpStream::connect(s.local_addr()).unwrap();
        write_frame(&mut raw, &[77]).unwrap();
        drop(raw);
        let mut c = client(&s, 0, 1, Some("t")).unwrap();
        c.set("ok", b"1").unwrap();
    }

    #[test]
    fn world_size_mismatch_out_of_range_and_duplicate_rank_are_refused() {
        let s = server(2, None);
        let (rank, msg) = rendezvous_msg(client(&s, 1, 3, None));
        assert_eq!(rank, 1);
        assert_eq!(msg, "rank 1 says WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2");
        let (_, msg) = rendezvous_msg(client(&s, 3, 2, None));
        assert_eq!(msg, "RANK=3 is out of range for WORLD_SIZE=2");
        let first = client(&s, 1, 2, None).unwrap();
        let (_, msg) = rendezvous_msg(client(&s, 1, 2, None));
        assert!(
            msg.starts_with("rank 1 is already connected to the store at"),
            "{msg}"
        );
        // Once the first connection is gone the rank may connect again.
        drop(first);
        let deadline = Instant::now() + T;
        while client(&s, 1, 2, None).is_err() {
            assert!(Instant::now() < deadline, "rank 1 could not reconnect");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn port_in_use_is_explained() {
        let holder = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = holder.local_addr().unwrap().port();
        let (rank, msg) = rendezvous_msg(StoreServer::bind("127.0.0.1", port, 2, None));
        assert_eq!(rank, 0);
        assert_eq!(
            msg,
            format!(
                "MASTER_ADDR:MASTER_PORT 127.0.0.1:{port} is already in use; pick another MASTER_PORT \
                 or stop the process holding it"
            )
        );
    }

    #[test]
    fn unreachable_store_times_out_with_a_hint() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t0 = Instant::now();
        let r = StoreClient::connect("127.0.0.1", port, 1, 2, None, Duration::from_millis(400));
        let (rank, msg) = rendezvous_msg(r);
        assert!(t0.elapsed() >= Duration::from_millis(400));
        assert!(t0.elapsed() < Duration::from_secs(3));
        assert_eq!(rank, 1);
        assert!(
            msg.starts_with(&format!(
                "rank 1 could not reach the store at 127.0.0.1:{port} after 0.4 s (is rank 0 running? \
                 MASTER_ADDR/MASTER_PORT)"
            )),
            "{msg}"
        );
    }

    #[test]
    fn client_waits_for_a_late_server() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let s = StoreServer::bind("127.0.0.1", port, 1, None).unwrap();
            std::thread::sleep(Duration::from_millis(500));
            s
        });
        let mut c = StoreClient::connect("127.0.0.1", port, 0, 1, None, T).unwrap();
        c.set("k", b"v").unwrap();
        drop(late.join().unwrap());
    }

    #[test]
    fn shutdown_closes_client_connections() {
        let s = server(1, None);
        let mut c = client(&s, 0, 1, None).unwrap();
        s.shutdown();
        let (_, msg) = rendezvous_msg(c.set("k", b"v"));
        assert!(
            msg.contains("closed the connection (rank 0 exited or crashed; see its log)"),
            "{msg}"
        );
    }
}
