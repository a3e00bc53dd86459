//! The process group over real sockets: rendezvous, collectives, and elastic re-forming.
use super::*;
use crate::dist::ReduceOp;
use std::net::TcpListener;
use std::time::Instant;

fn config(
    rank: usize,
    world_size: usize,
    port: u16,
    timeout: Duration,
    token: Option<&str>,
) -> GroupConfig {
    GroupConfig {
        rank,
        world_size,
        master_addr: "127.0.0.1".into(),
        master_port: port,
        timeout,
        token: token.map(String::from),
        shared_memory: true,
        store_elsewhere: false,
        joining: false,
    }
}

/// Runs `f` on every rank of a group whose rank 0 serves the store on a free port.
fn with_group<R: Send>(
    world: usize,
    ranks: &[usize],
    timeout: Duration,
    token: Option<&str>,
    f: impl Fn(Result<ProcessGroup>) -> R + Sync,
) -> Vec<R> {
    let server = StoreServer::bind("127.0.0.1", 0, world, token.map(String::from)).unwrap();
    let port = server.port();
    let mut server = Some(server);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|&rank| {
                let server = if rank == 0 { server.take() } else { None };
                let cfg = config(rank, world, port, timeout, token);
                s.spawn(move || f(ProcessGroup::join(&cfg, server)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn rendezvous_msg<T>(r: &Result<T>) -> (usize, String) {
    match r {
        Err(Error::Rendezvous { rank, msg }) => (*rank, msg.clone()),
        Err(e) => panic!("expected a rendezvous error, got {e}"),
        Ok(_) => panic!("expected a rendezvous error, got success"),
    }
}

#[test]
fn group_of_three_with_token_reduces_and_shuts_down() {
    let results = with_group(3, &[0, 1, 2], Duration::from_secs(5), Some("tok"), |pg| {
        let mut pg = pg.unwrap();
        let rank = pg.rank() as f32;
        assert_eq!(pg.world_size(), 3);
        let mut buf = vec![rank; 7];
        pg.collective().all_reduce(&mut buf, ReduceOp::Sum).unwrap();
        pg.store().unwrap().add("done", 1).unwrap();
        pg.shutdown().unwrap();
        buf
    });
    assert!(results.iter().all(|b| *b == [3.0; 7]));
}

#[test]
fn init_binds_the_store_on_rank_0() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                s.spawn(move || {
                    let mut pg =
                        ProcessGroup::init(&config(rank, 2, port, Duration::from_secs(5), None))?;
                    let mut buf = [rank as f32 + 1.0];
                    pg.collective().all_reduce(&mut buf, ReduceOp::Avg)?;
                    pg.shutdown()?;
                    Ok::<_, Error>(buf[0])
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    for r in results {
        assert_eq!(r.unwrap(), 1.5);
    }
}

#[test]
fn world_of_one_opens_no_socket() {
    // The port is taken: a world of one must not even try to bind it.
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let mut pg = ProcessGroup::init(&config(0, 1, port, Duration::from_secs(1), None)).unwrap();
    assert!(pg.store().is_none());
    let mut buf = [2.0, 4.0];
    pg.collective().all_reduce(&mut buf, ReduceOp::Avg).unwrap();
    assert_eq!(buf, [2.0, 4.0]);
    pg.shutdown().unwrap();
}

#[test]
fn bad_rank_and_world_size_are_configuration_errors() {
    let err = ProcessGroup::init(&config(2, 2, 1, Duration::from_secs(1), None))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "environment variable RANK: RANK=2 is out of range for WORLD_SIZE=2"
    );
    assert_eq!(err.exit_code(), crate::error::EXIT_CONFIG);
    let err = ProcessGroup::init(&config(0, 0, 1, Duration::from_secs(1), None))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "environment variable WORLD_SIZE: must be at least 1"
    );
}

#[test]
fn rank_that_never_comes_is_named() {
    let t0 = Instant::now();
    let results = with_group(3, &[0, 1], Duration::from_secs(1), None, |pg| {
        rendezvous_msg(&pg)
    });
    assert!(t0.elapsed() < Duration::from_secs(4));
    for (rank, (err_rank, msg)) in results.into_iter().enumerate() {
        assert_eq!(err_rank, rank);
        assert!(msg.starts_with("rank 2 never joined within 1 s"), "{msg}");
    }
}

#[test]
fn world_size_mismatch_is_reported_on_both_sides() {
    let server = StoreServer::bind("127.0.0.1", 0, 2, None).unwrap();
    let port = server.port();
    let (r0, r1) = std::thread::scope(|s| {
        let r0 = s.spawn(move || {
            ProcessGroup::join(
                &config(0, 2, port, Duration::from_secs(1), None),
                Some(server),
            )
        });
        let r1 = s.spawn(move || {
            ProcessGroup::join(&config(1, 3, port, Duration::from_secs(1), None), None)
        });
        (r0.join().unwrap(), r1.join().unwrap())
    });
    assert_eq!(
        rendezvous_msg(&r1),
        (
            1,
            "rank 1 says WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2".into()
        )
    );
    let (rank, msg) = rendezvous_msg(&r0);
    assert_eq!(rank, 0);
    assert!(msg.starts_with("rank 1 never joined within 1 s"), "{msg}");
}

#[test]
fn wrong_token_is_refused() {
    let server = StoreServer::bind("127.0.0.1", 0, 2, Some("right".into())).unwrap();
    let port = server.port();
    let r1 = ProcessGroup::join(
        &config(1, 2, port, Duration::from_secs(1), Some("wrong")),
        None,
    );
    let (rank, msg) = rendezvous_msg(&r1);
    assert_eq!(rank, 1);
    assert_eq!(
        msg,
        format!("rank 1 was refused by the store at 127.0.0.1:{port}: wrong or missing DDP_TOKEN")
    );
}

#[test]
fn port_in_use_on_rank_0() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let r0 = ProcessGroup::init(&config(0, 2, port, Duration::from_secs(1), None));
    let (rank, msg) = rendezvous_msg(&r0);
    assert_eq!(rank, 0);
    assert!(
        msg.starts_with(&format!(
            "MASTER_ADDR:MASTER_PORT 127.0.0.1:{port} is already in use"
        )),
        "{msg}"
    );
}

/// Four replicas whose store is served outside them; replica `dead` leaves after one
/// all-reduce (its ring and store connection close, as when its process is killed). The
/// others' next all-reduce fails; they re-form as three, ranks following their ids, and
/// all-reduce again.
fn three_survivors_reform(dead: usize) {
    let server = StoreServer::bind("127.0.0.1", 0, 4, None).unwrap();
    let port = server.port();
    let t = Duration::from_secs(10);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|id| {
                s.spawn(move || {
                    let mut cfg = config(id, 4, port, t, None);
                    cfg.store_elsewhere = true;
                    let mut pg = ProcessGroup::join(&cfg, None).unwrap();
                    let mut buf = vec![id as f32 + 1.0; 1000];
                    pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                    assert_eq!(buf[999], 10.0);
                    if id == dead {
                        // Everyone has the first sum before this replica's sockets close.
                        std::thread::sleep(Duration::from_millis(300));
                        return None;
                    }
                    let mut buf = vec![1.0; 1000];
                    assert!(pg.all_reduce(&mut buf, ReduceOp::Sum).is_err());
                    let t0 = Instant::now();
                    let d = pg.reform(1, Duration::from_secs(30)).unwrap();
                    let took = t0.elapsed();
                    let mut buf = vec![id as f32 + 1.0; 1000];
                    pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                    Some((id, pg.rank(), pg.world_size(), buf[999], d, took))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let survivors: Vec<_> = results.into_iter().flatten().collect();
    assert_eq!(survivors.len(), 3);
    let ids: Vec<u32> = (0..4).filter(|&i| i != dead as u32).collect();
    for (i, (id, rank, world, sum, d, took)) in survivors.into_iter().enumerate() {
        assert_eq!((rank, world), (i, 3), "replica {id}");
        assert_eq!(sum, 10.0 - (dead as f32 + 1.0));
        assert_eq!(d.generation.members, ids);
        assert_eq!(d.left, vec![dead as u32]);
        assert!(took < Duration::from_secs(5), "replica {id} took {took:?}");
    }
}

#[test]
fn survivors_of_a_lost_replica_reform_the_group() {
    three_survivors_reform(2);
}

#[test]
fn survivors_of_rank_0_reform_the_group_with_the_store_elsewhere() {
    three_survivors_reform(0);
}

/// Under torchrun (rank 0 serves the store), a lost replica other than rank 0 is survived.
#[test]
fn a_group_whose_rank_0_serves_the_store_outlives_another_replica() {
    let server = StoreServer::bind("127.0.0.1", 0, 3, None).unwrap();
    let port = server.port();
    let t = Duration::from_secs(10);
    let mut server = Some(server);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|id| {
                let own = if id == 0 { server.take() } else { None };
                s.spawn(move || {
                    let cfg = config(id, 3, port, t, None);
                    let mut pg = ProcessGroup::join(&cfg, own).unwrap();
                    let mut buf = vec![1.0; 100];
                    pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                    if id == 2 {
                        std::thread::sleep(Duration::from_millis(300));
                        return None;
                    }
                    assert!(pg.all_reduce(&mut buf, ReduceOp::Sum).is_err());
                    let d = pg.reform(1, Duration::from_secs(30)).unwrap();
                    let mut buf = vec![id as f32 + 1.0; 100];
                    pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                    Some((pg.world_size(), buf[99], d.left))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let survivors: Vec<_> = results.into_iter().flatten().collect();
    assert_eq!(survivors, vec![(2, 3.0, vec![2]); 2]);
}

/// A replica standing by joins at a boundary the members choose: rank 0 sees it waiting,
/// every member re-forms, and the joiner is taken in as its id's rank.
#[test]
fn a_replica_standing_by_is_taken_in_when_the_members_re_form() {
    let server = StoreServer::bind("127.0.0.1", 0, 4, None).unwrap();
    let port = server.port();
    let t = Duration::from_secs(10);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|id| {
                s.spawn(move || {
                    let mut cfg = config(id, if id == 3 { 4 } else { 3 }, port, t, None);
                    cfg.store_elsewhere = true;
                    cfg.joining = id == 3;
                    let mut pg = if id == 3 {
                        ProcessGroup::init(&cfg).unwrap()
                    } else {
                        cfg.world_size = 4;
                        // The members' generation 0 is ids 0..3 of a store for 4.
                        let mut pg = ProcessGroup::standing_by(&cfg).unwrap();
                        pg.generation = 0;
                        pg
                    };
                    if id == 3 {
                        assert_eq!((pg.rank(), pg.world_size()), (0, 1));
                        let d = pg.reform(0, t).unwrap();
                        assert_eq!(d.joined, vec![3]);
                    } else {
                        // Every member is connected (as in a group under way); rank 0
                        // waits until the joiner has asked, then all re-form.
                        pg.store().unwrap().wait_all_joined(t).unwrap();
                        if id == 0 {
                            let start = Instant::now();
                            while !pg.joiner_waiting().unwrap() {
                                assert!(start.elapsed() < t, "no joiner announced");
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        }
                        let d = pg.reform(7, Duration::from_secs(30)).unwrap();
                        assert_eq!(d.generation.members, vec![0, 1, 2, 3]);
                    }
                    let mut buf = vec![id as f32 + 1.0; 100];
                    pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                    (pg.rank(), pg.world_size(), buf[99])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(server);
    assert_eq!(
        results,
        vec![(0, 4, 10.0), (1, 4, 10.0), (2, 4, 10.0), (3, 4, 10.0)]
    );
}
