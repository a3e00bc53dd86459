use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::{StoreClient, StoreServer};
use crate::dist::wire::write_frame;
use crate::{Error, Result};

const T: Duration = Duration::from_secs(5);

fn server(world: usize, token: Option<&str>) -> StoreServer {
    StoreServer::bind("127.0.0.1", 0, world, token.map(String::from)).unwrap()
}

fn client(s: &StoreServer, rank: usize, world: usize, token: Option<&str>) -> Result<StoreClient> {
    StoreClient::connect("127.0.0.1", s.port(), rank, world, token, T)
}

fn rendezvous_msg(r: Result<impl std::fmt::Debug>) -> (usize, String) {
    match r {
        Err(Error::Rendezvous { rank, msg }) => (rank, msg),
        other => panic!("expected a rendezvous error, got {other:?}"),
    }
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

/// Replica 1 of 3 dies (its connection closes): the other two ask for the next generation and
/// get it as soon as both asked, without waiting the settle time for the dead one.
#[test]
fn rejoin_leaves_out_a_replica_whose_connection_closed() {
    let s = server(3, None);
    let mut c0 = client(&s, 0, 3, None).unwrap();
    let c1 = client(&s, 1, 3, None).unwrap();
    let mut c2 = client(&s, 2, 3, None).unwrap();
    drop(c1);
    let settle = Duration::from_secs(30);
    let t0 = Instant::now();
    let other = std::thread::spawn(move || c2.rejoin(0, 12, settle, T).unwrap());
    let d = c0.rejoin(0, 11, settle, T).unwrap();
    assert_eq!(other.join().unwrap(), d);
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(d.generation.number, 1);
    assert_eq!(d.generation.members, vec![0, 2]);
    assert_eq!(d.steps, vec![11, 12]);
    assert_eq!(d.left, vec![1]);
    // A generation that is over is refused with a clear message.
    let (_, msg) = rendezvous_msg(c0.rejoin(7, 11, settle, T));
    assert!(
        msg.contains("generation 7 is over: the group is at generation 1"),
        "{msg}"
    );
}

/// A replica that keeps its connection but never asks (a stopped process) is left out once
/// the settle time has passed; an ask nobody completes within the wait names who is missing.
#[test]
fn rejoin_waits_the_settle_time_for_a_silent_replica() {
    let s = server(2, None);
    let mut c0 = client(&s, 0, 2, None).unwrap();
    let _silent = client(&s, 1, 2, None).unwrap();
    let (_, msg) =
        rendezvous_msg(c0.rejoin(0, 3, Duration::from_secs(60), Duration::from_millis(300)));
    assert!(msg.contains("replicas 1 to rejoin the group"), "{msg}");
    let t0 = Instant::now();
    let d = c0.rejoin(0, 3, Duration::from_millis(500), T).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!((d.generation.members, d.left), (vec![0], vec![1]));
}
