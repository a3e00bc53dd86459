//! The store server, hosted by rank 0: an accept thread and one thread per connection over a
//! shared key-value map.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::dist::elastic::{Answer, Ask, Board, JOIN, JOIN_KEY};
use crate::dist::handshake::{STORE_PURPOSE, greet};
use crate::dist::wire::{MAX_FRAME, Refusal, Request, Response, recv_request, secs, send_msg};
use crate::{Error, Result};

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

struct State {
    kv: HashMap<String, Vec<u8>>,
    /// Ranks that completed the handshake at least once.
    joined: Vec<bool>,
    /// Ranks with a live connection (a second connection with the same rank is refused).
    live: Vec<bool>,
    /// Clones of the live connections, shut down when the server stops.
    conns: Vec<(u64, TcpStream)>,
    next_conn: u64,
    /// An elastic group's generations (asked for only by elastic runs).
    board: Board,
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
                kv: HashMap::new(),
                joined: vec![false; world_size],
                live: vec![false; world_size],
                conns: Vec::new(),
                next_conn: 0,
                board: Board::new(world_size),
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
        // An elastic round may be waiting for this replica.
        shared.changed.notify_all();
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
        if send_msg(stream, handle(shared, rank, request).encode()).is_err() {
            return;
        }
    }
}

fn handle(shared: &Shared, rank: usize, request: Request) -> Response {
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
        Request::Rejoin {
            from,
            step,
            settle_ms,
            wait_ms,
        } => rejoin(shared, rank as u32, from, step, settle_ms, wait_ms),
        Request::Hello { .. } | Request::Auth { .. } => {
            Response::Failed("already connected".into())
        }
    }
}

/// Replica `id` asks for the generation after `from` ([`Board::ask`]; a joiner, `from` =
/// [`JOIN`], after the current one, which it announces under [`JOIN_KEY`] for the members to
/// see); waits for the decision (re-deciding as asks arrive, connections end and the settle
/// time passes) at most `wait_ms`.
fn rejoin(
    shared: &Shared,
    id: u32,
    from: u64,
    step: u64,
    settle_ms: u64,
    wait_ms: u64,
) -> Response {
    let start = Instant::now();
    let deadline = start + Duration::from_millis(wait_ms);
    let settle = Duration::from_millis(settle_ms);
    let mut state = shared.lock();
    let (from, ask) = if from == JOIN {
        let current = state.board.current().number;
        state
            .kv
            .insert(JOIN_KEY.to_string(), current.to_string().into_bytes());
        (current, Ask::joiner())
    } else {
        (from, Ask::member(step))
    };
    loop {
        let live = state.live.clone();
        let connected = |r: u32| live.get(r as usize).copied().unwrap_or(false);
        match state
            .board
            .ask(id, from, ask, connected, Instant::now(), settle)
        {
            Answer::Decided(d) => {
                drop(state);
                shared.changed.notify_all();
                return Response::Members(d);
            }
            Answer::Stale { current } => {
                return Response::Failed(format!(
                    "generation {from} is over: the group is at generation {current}"
                ));
            }
            Answer::Wait { pending } => {
                let now = Instant::now();
                if now >= deadline || shared.stop.load(Ordering::SeqCst) {
                    let ids: Vec<String> = pending.iter().map(u32::to_string).collect();
                    return Response::Failed(format!(
                        "waited {} s for replicas {} to rejoin the group",
                        secs(now - start),
                        ids.join(", ")
                    ));
                }
                let slice = (deadline - now).min(Duration::from_millis(100));
                state = shared
                    .changed
                    .wait_timeout(state, slice)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
    }
}
