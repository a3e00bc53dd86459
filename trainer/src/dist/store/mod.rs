//! The rendezvous store: a small TCP key-value server hosted by rank 0 (by the launcher for an
//! elastic run), and its client.
//!
//! Every rank connects a [`StoreClient`] to the [`StoreServer`] at `MASTER_ADDR:MASTER_PORT`,
//! says its rank and world size, answers an HMAC challenge when `DDP_TOKEN` is set, and then
//! exchanges small values (ring addresses, NCCL ids, digests) through `set` / `get` / `add`;
//! an elastic group's survivors ask it for their next generation (`rejoin`).
//! See `docs/collectives.md` for the protocol.
//!
//! Layout:
//! - `server`: [`StoreServer`], an accept thread + one thread per connection over a shared map;
//! - `client`: [`StoreClient`], connect with retries, handshake, synchronous request/response calls;
//! - the messages are `dist::wire`'s, the handshake `dist::handshake`'s (shared with the ring's
//!   links).

mod client;
mod server;
#[cfg(test)]
mod tests;

pub use client::StoreClient;
pub use server::StoreServer;
