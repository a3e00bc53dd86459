//! The handshake that opens every store connection and every ring link: the connecting side
//! says Hello (its rank and world size); with a `DDP_TOKEN` the accepting side answers with a
//! random nonce and checks the HMAC-SHA256 answer; then it welcomes or refuses the peer.

use std::io;
use std::net::TcpStream;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::wire::{
    MAX_HANDSHAKE_FRAME, NONCE_LEN, Refusal, Request, Response, bad_data, recv_request,
    recv_response, send_msg,
};

/// Domain separation of the store connections' HMAC answers, so that an answer for one purpose
/// is useless for another.
pub(crate) const STORE_PURPOSE: &[u8] = b"ddp-store-v1";
/// Domain separation of the ring links' HMAC answers.
pub(crate) const RING_PURPOSE: &[u8] = b"ddp-ring-v1";

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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
