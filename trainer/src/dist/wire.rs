//! The wire format of the rendezvous store and of the ring's handshake: length-prefixed frames
//! carrying a [`Request`] or a [`Response`], parsed once at the edge.
//!
//! A frame is a little-endian `u32` length, then the payload; a message is a tag byte, then
//! its fields (integers little-endian, byte strings with a `u32` length). See
//! `docs/collectives.md` for the protocol.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::Result;

/// Largest frame accepted before the handshake completed (a Hello or an Auth is a few bytes).
pub(crate) const MAX_HANDSHAKE_FRAME: usize = 4 << 10;
/// Largest frame accepted from an authenticated peer (store values are small metadata).
pub(crate) const MAX_FRAME: usize = 256 << 20;
/// Length of the server's challenge nonce and of the HMAC-SHA256 answer.
pub(crate) const NONCE_LEN: usize = 32;

/// Writes one frame: a little-endian `u32` length, then the payload.
pub(crate) fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(ErrorKind::InvalidInput, "store message over 4 GiB"))?;
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(payload);
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame of at most `max` bytes. A clean end of stream is `UnexpectedEof`.
pub(crate) fn read_frame(r: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
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
pub(crate) enum Request {
    Hello {
        rank: u32,
        world_size: u32,
    },
    Auth {
        tag: Vec<u8>,
    },
    Set {
        key: String,
        value: Vec<u8>,
    },
    Get {
        key: String,
        wait_ms: u64,
    },
    Add {
        key: String,
        delta: i64,
    },
    WaitJoined {
        wait_ms: u64,
    },
    /// An elastic replica asks for the generation after `from` (see [`super::elastic`]), having
    /// completed `step` steps; a member still connected that has not asked after `settle_ms` is
    /// left out. Answered with [`Response::Members`] once decided, within `wait_ms`.
    Rejoin {
        from: u64,
        step: u64,
        settle_ms: u64,
        wait_ms: u64,
    },
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
    /// Answer to `Rejoin`: the next generation.
    Members(super::elastic::NextGeneration),
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
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Request::Hello { rank, world_size } => Enc::new(1).u32(*rank).u32(*world_size),
            Request::Auth { tag } => Enc::new(2).bytes(tag),
            Request::Set { key, value } => Enc::new(3).bytes(key.as_bytes()).bytes(value),
            Request::Get { key, wait_ms } => Enc::new(4).bytes(key.as_bytes()).u64(*wait_ms),
            Request::Add { key, delta } => Enc::new(5).bytes(key.as_bytes()).u64(*delta as u64),
            Request::WaitJoined { wait_ms } => Enc::new(6).u64(*wait_ms),
            Request::Rejoin {
                from,
                step,
                settle_ms,
                wait_ms,
            } => Enc::new(7)
                .u64(*from)
                .u64(*step)
                .u64(*settle_ms)
                .u64(*wait_ms),
        }
        .0
    }

    pub(crate) fn decode(buf: &[u8]) -> Result<Request, String> {
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
            7 => Request::Rejoin {
                from: d.u64()?,
                step: d.u64()?,
                settle_ms: d.u64()?,
                wait_ms: d.u64()?,
            },
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
            Response::Members(d) => {
                let ids =
                    |e: Enc, v: &[u32]| v.iter().fold(e.u32(v.len() as u32), |e, x| e.u32(*x));
                let e = Enc::new(10).u64(d.generation.number);
                let e = ids(e, &d.generation.members);
                let e = d.steps.iter().fold(e, |e, s| e.u64(*s));
                ids(ids(e, &d.left), &d.joined)
            }
        }
        .0
    }

    pub(crate) fn decode(buf: &[u8]) -> Result<Response, String> {
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
            10 => {
                let ids = |d: &mut Dec| -> Result<Vec<u32>, String> {
                    let n = d.u32()? as usize;
                    (0..n).map(|_| d.u32()).collect()
                };
                let number = d.u64()?;
                let members = ids(&mut d)?;
                let steps = (0..members.len())
                    .map(|_| d.u64())
                    .collect::<Result<Vec<_>, _>>()?;
                Response::Members(super::elastic::NextGeneration {
                    generation: super::elastic::Generation { number, members },
                    steps,
                    left: ids(&mut d)?,
                    joined: ids(&mut d)?,
                })
            }
            tag => return Err(format!("unknown response type {tag}")),
        };
        d.end()?;
        Ok(resp)
    }
}

pub(crate) fn send_msg(stream: &mut TcpStream, payload: Vec<u8>) -> io::Result<()> {
    write_frame(stream, &payload)
}

pub(crate) fn bad_data(msg: String) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, msg)
}

pub(crate) fn recv_request(stream: &mut TcpStream, max: usize) -> io::Result<Request> {
    Request::decode(&read_frame(stream, max)?).map_err(bad_data)
}

pub(crate) fn recv_response(stream: &mut TcpStream, max: usize) -> io::Result<Response> {
    Response::decode(&read_frame(stream, max)?).map_err(bad_data)
}

/// Seconds for messages: "30" for whole seconds, "1.5" otherwise.
pub(crate) fn secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

/// A duration as the milliseconds of a wait field (saturating).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Request::Rejoin {
                from: 3,
                step: 1042,
                settle_ms: 60_000,
                wait_ms: 90_000,
            },
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
            Response::Members(crate::dist::elastic::NextGeneration {
                generation: crate::dist::elastic::Generation {
                    number: 2,
                    members: vec![1, 2, 5],
                },
                steps: vec![40, 41, 40],
                left: vec![0, 3],
                joined: vec![5],
            }),
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
    fn seconds_are_shown_whole_or_with_one_decimal() {
        assert_eq!(secs(Duration::from_secs(30)), "30");
        assert_eq!(secs(Duration::from_millis(1500)), "1.5");
    }
}
