//! The store client: connect with retries, handshake, synchronous request/response calls.

use std::io::{self, ErrorKind};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::dist::elastic::{JOIN, NextGeneration};
use crate::dist::handshake::{STORE_PURPOSE, hello};
use crate::dist::wire::{
    MAX_FRAME, Refusal, Request, Response, millis, recv_response, secs, send_msg,
};
use crate::{Error, Result};

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

    /// The value of `key` if some rank has set it, without waiting.
    pub fn try_get(&mut self, key: &str) -> Result<Option<Vec<u8>>> {
        let what = format!("get '{key}'");
        match self.call(
            Request::Get {
                key: key.into(),
                wait_ms: 0,
            },
            Duration::ZERO,
            &what,
        )? {
            Response::Value(v) => Ok(Some(v)),
            Response::Missing => Ok(None),
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

    /// An elastic replica's ask for the generation after `from`, having completed `step` steps
    /// ([`crate::dist::elastic`]): members still connected that do not ask within `settle` are
    /// left out. Waits for the store's decision at most `timeout`.
    pub fn rejoin(
        &mut self,
        from: u64,
        step: u64,
        settle: Duration,
        timeout: Duration,
    ) -> Result<NextGeneration> {
        let what = if from == JOIN {
            "join the elastic group".to_string()
        } else {
            format!("rejoin after generation {from}")
        };
        match self.call(
            Request::Rejoin {
                from,
                step,
                settle_ms: millis(settle),
                wait_ms: millis(timeout),
            },
            timeout,
            &what,
        )? {
            Response::Members(d) => Ok(d),
            other => Err(self.unexpected(&what, other)),
        }
    }
}
