//! The rendezvous port of a local world.

use crate::error::{Error, Result};

/// The lowest port a rendezvous port is picked from (below the kernel's ephemeral range).
const LOWEST_PICKED_PORT: u16 = 10_000;

/// A free port on 127.0.0.1 for a local world's rendezvous, outside the kernel's ephemeral
/// range (`/proc/sys/net/ipv4/ip_local_port_range`). A port from `bind(:0)` is only free for a
/// moment: until rank 0 binds it, any other process's listener on port 0 or outgoing
/// connection may be given the same port (seen in CI, with tests running side by side). A
/// port below the ephemeral range is never handed out that way; a bind checks it is free now.
/// Falls back to `bind(:0)` where the range leaves no room below it.
pub fn free_port() -> Result<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let mut seed = [0u8; 8];
    let _ = getrandom::fill(&mut seed);
    for port in picked_ports(low, u64::from_le_bytes(seed)).take(64) {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| Error::Launch(format!("cannot pick a free port on 127.0.0.1: {e}")))
}

/// Ports to try, from `seed`, in `LOWEST_PICKED_PORT..ephemeral_low` (none if that is empty).
fn picked_ports(ephemeral_low: u16, seed: u64) -> impl Iterator<Item = u16> {
    let span = ephemeral_low.saturating_sub(LOWEST_PICKED_PORT) as u64;
    let mut x = seed | 1;
    (0..).map_while(move |_| {
        // xorshift64: a different sequence per launcher, so two launchers rarely collide.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (span > 0).then(|| LOWEST_PICKED_PORT + (x % span) as u16)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_ports_are_picked_below_the_ephemeral_range() {
        let ports: Vec<u16> = picked_ports(32_768, 7).take(1000).collect();
        assert_eq!(ports.len(), 1000);
        assert!(
            ports
                .iter()
                .all(|p| (LOWEST_PICKED_PORT..32_768).contains(p))
        );
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert!(distinct.len() > 900, "{} distinct", distinct.len());
        assert_ne!(
            picked_ports(32_768, 1).take(4).collect::<Vec<_>>(),
            picked_ports(32_768, 2).take(4).collect::<Vec<_>>()
        );
        // No room below the range: nothing to pick (free_port falls back to bind(:0)).
        assert_eq!(picked_ports(LOWEST_PICKED_PORT, 7).next(), None);
        let port = free_port().unwrap();
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
    }
}
