use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::*;

fn sh(nproc: usize, dir: &Path, script: &str) -> LaunchOptions {
    let mut opts = LaunchOptions::new(nproc, "/bin/sh", dir);
    opts.args = vec!["-c".into(), script.into()];
    opts.grace = Duration::from_secs(2);
    opts
}

/// Shell that waits until every file in `files` exists (at most 10 s, polling every 10 ms): a
/// rank waits for the others to be set up, however loaded the machine.
fn await_files(files: &[PathBuf]) -> String {
    let missing: Vec<String> = files
        .iter()
        .map(|f| format!("[ ! -e '{}' ]", f.display()))
        .collect();
    format!(
        "i=0; while {{ {}; }} && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done",
        missing.join(" || ")
    )
}

/// A script for 2 ranks: rank `waiting` runs `first` once the other rank has reached `READY`
/// in `other` (after its `trap`: so the SIGTERM that `first` brings finds it set up).
fn once_ready(dir: &Path, waiting: usize, first: &str, other: &str) -> String {
    let ready = dir.join("ready");
    let other = other.replace("READY", &format!("touch '{}'", ready.display()));
    let wait = await_files(&[ready]);
    format!(r#"if [ "$RANK" = {waiting} ]; then {wait}; {first}; fi; {other}"#)
}

fn log(dir: &Path, rank: usize) -> String {
    std::fs::read_to_string(log_path(dir, rank)).unwrap()
}

/// The numbers after `word ` in the rank logs (pids the scripts printed).
fn pids(dir: &Path, nproc: usize, word: &str) -> Vec<i32> {
    (0..nproc)
        .flat_map(|rank| {
            log(dir, rank)
                .lines()
                .filter_map(|l| l.strip_prefix(word)?.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Alive and not a zombie waiting for some other parent.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

fn assert_all_gone(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<_> = pids.iter().filter(|&&p| alive(p)).collect();
    assert!(left.is_empty(), "still running: {left:?}");
}

#[test]
fn replicas_get_the_torchrun_environment() {
    let dir = tempfile::tempdir().unwrap();
    let opts = sh(
        3,
        dir.path(),
        r#"echo "$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_PORT $RAYON_NUM_THREADS""#,
    );
    launch(&opts).unwrap();
    let lines: Vec<String> = (0..3).map(|r| log(dir.path(), r)).collect();
    let port: u16 = lines[0].split(' ').nth(3).unwrap().parse().unwrap();
    assert_ne!(port, 0);
    let threads = threads::per_replica(None, 3, threads::available_cores());
    for (rank, line) in lines.iter().enumerate() {
        assert_eq!(*line, format!("{rank} 3 {rank} {port} {threads}\n"));
    }
}

#[test]
fn explicit_port_threads_and_extra_variables() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = sh(
        2,
        dir.path(),
        r#"echo "$LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT" \
            "$DDP_THREADS $RAYON_NUM_THREADS ${TORCHELASTIC_RESTART_COUNT:-unset} $EXTRA""#,
    );
    opts.master_port = Some(23456);
    opts.threads_per_replica = Some(3);
    opts.env = vec![
        ("EXTRA".into(), "x y".into()),
        ("DDP_THREADS".into(), "5".into()),
    ];
    launch(&opts).unwrap();
    let restart = std::env::var("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|_| "0".into());
    for rank in 0..2 {
        assert_eq!(
            log(dir.path(), rank),
            format!("2 0 127.0.0.1 23456 5 3 {restart} x y\n")
        );
    }
}

#[test]
fn a_node_of_several_starts_its_share_of_the_global_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = sh(
        2,
        dir.path(),
        r#"echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT""#,
    );
    opts.nnodes = 3;
    opts.node_rank = 1;
    opts.master_addr = "job-master-0".into();
    opts.master_port = Some(23456);
    launch(&opts).unwrap();
    // Logs are named by global rank: node 1 of 3 × 2 writes rank-2 and rank-3.
    for (local, rank) in [(0, 2), (1, 3)] {
        assert_eq!(
            log(dir.path(), rank),
            format!("{rank} 6 {local} 2 1 job-master-0 23456\n")
        );
    }
    assert!(!log_path(dir.path(), 0).exists());
    opts.node_rank = 3;
    let e = launch(&opts).unwrap_err().to_string();
    assert!(e.contains("node rank 3 of 3 nodes"), "{e}");
}

#[test]
fn logs_are_appended_across_launches() {
    let dir = tempfile::tempdir().unwrap();
    let opts = sh(1, dir.path(), "echo run");
    launch(&opts).unwrap();
    launch(&opts).unwrap();
    assert_eq!(log(dir.path(), 0), "run\nrun\n");
}

/// The launch's error, which ends it well before its replicas' `sleep 30` would: the others
/// were stopped, not waited for.
fn fails_before_the_sleepers(opts: &LaunchOptions) -> Error {
    let start = Instant::now();
    let err = launch(opts).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}: the other replicas were waited for, not stopped",
        start.elapsed()
    );
    err
}

#[test]
fn killed_replica_stops_the_others() {
    let dir = tempfile::tempdir().unwrap();
    // Rank 1 dies once every rank has said its pids (at most 10 s).
    let d = dir.path().display();
    let wait = await_files(&[dir.path().join("ready-0"), dir.path().join("ready-2")]);
    let script = format!(
        r#"echo "pid $$"; sleep 30 & echo "sleeper $!"; touch '{d}/ready-'$RANK
        if [ "$RANK" = 1 ]; then {wait}; kill -9 $$; fi; wait"#
    );
    let err = fails_before_the_sleepers(&sh(3, dir.path(), &script));
    match &err {
        Error::Replica {
            rank,
            pid,
            status,
            code,
            log,
            ..
        } => {
            assert_eq!(*rank, 1);
            assert_eq!(status, "was killed by signal 9 (SIGKILL)");
            assert_eq!(*code, None);
            assert_eq!(*log, log_path(dir.path(), 1));
            assert_eq!(pids(dir.path(), 3, "pid ")[1], *pid as i32);
        }
        other => panic!("expected Error::Replica, got {other:?}"),
    }
    assert_eq!(err.exit_code(), 1);
    let shells = pids(dir.path(), 3, "pid ");
    let sleepers = pids(dir.path(), 3, "sleeper ");
    assert_eq!((shells.len(), sleepers.len()), (3, 3));
    assert_all_gone(&shells);
    assert_all_gone(&sleepers);
}

#[test]
fn config_error_exit_code_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let opts = sh(
        3,
        dir.path(),
        r#"if [ "$RANK" = 2 ]; then echo bad spec >&2; exit 2; fi; sleep 30"#,
    );
    let err = fails_before_the_sleepers(&opts);
    match &err {
        Error::Replica {
            rank: 2,
            status,
            code: Some(2),
            ..
        } => {
            assert_eq!(status, "exited with code 2");
        }
        other => panic!("expected rank 2 with code 2, got {other:?}"),
    }
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().starts_with("rank 2 (pid "), "{err}");
    let tail = format!(
        "exited with code 2; see {}",
        log_path(dir.path(), 2).display()
    );
    assert!(err.to_string().ends_with(&tail), "{err}");
    assert_eq!(log(dir.path(), 2), "bad spec\n");
}

#[test]
fn the_peer_that_left_is_reported_not_the_replica_that_lost_it() {
    let dir = tempfile::tempdir().unwrap();
    // Rank 1 loses its peer at once (exit 75); rank 0, the cause, ends a moment later.
    let opts = sh(
        2,
        dir.path(),
        r#"if [ "$RANK" = 1 ]; then exit 75; fi; sleep 0.5; echo bad data >&2; exit 2"#,
    );
    let err = fails_before_the_sleepers(&opts);
    assert!(
        matches!(
            err,
            Error::Replica {
                rank: 0,
                code: Some(2),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn runtime_failure_exit_code_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let err = launch(&sh(2, dir.path(), r#"[ "$RANK" = 0 ] && exit 3; sleep 30"#)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Replica {
                rank: 0,
                code: Some(3),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 1);
}

#[test]
fn stderr_and_stdout_lines_stay_whole_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"i=0; while [ $i -lt 100 ]; do
        echo "out $i"; echo "err $i" >&2; i=$((i+1))
    done; printf tail"#;
    launch(&sh(1, dir.path(), script)).unwrap();
    let text = log(dir.path(), 0);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 201, "{text}");
    let outs: Vec<String> = lines
        .iter()
        .filter(|l| l.starts_with("out "))
        .map(|l| l.to_string())
        .collect();
    let errs: Vec<String> = lines
        .iter()
        .filter(|l| l.starts_with("err "))
        .map(|l| l.to_string())
        .collect();
    assert_eq!(
        outs,
        (0..100).map(|i| format!("out {i}")).collect::<Vec<_>>()
    );
    assert_eq!(
        errs,
        (0..100).map(|i| format!("err {i}")).collect::<Vec<_>>()
    );
    assert!(
        lines.contains(&"tail"),
        "an unterminated last line is kept: {text}"
    );
    assert!(text.ends_with('\n'));
}

#[test]
fn interrupt_terminates_then_kills_after_grace() {
    let dir = tempfile::tempdir().unwrap();
    // The replicas ignore SIGTERM, so only SIGKILL after the grace stops them.
    let script = r#"trap '' TERM; echo "pid $$"; sleep 30 & echo "sleeper $!"; wait; wait"#;
    let mut opts = sh(2, dir.path(), script);
    opts.grace = Duration::from_millis(500);
    let flag = Arc::new(AtomicI32::new(0));
    let setter = {
        let flag = flag.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(400));
            flag.store(libc::SIGINT, Ordering::SeqCst);
        })
    };
    let start = Instant::now();
    let ended = run(&opts, &flag).unwrap();
    assert!(matches!(ended, Ended::Interrupted { .. }), "{ended:?}");
    let err = ended.into_result().unwrap_err();
    setter.join().unwrap();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(850) && took < Duration::from_secs(3),
        "took {took:?}"
    );
    match &err {
        Error::Launch(msg) => assert_eq!(msg, "interrupted by SIGINT; stopped ranks 0, 1"),
        other => panic!("expected Error::Launch, got {other:?}"),
    }
    assert_all_gone(&pids(dir.path(), 2, "pid "));
    assert_all_gone(&pids(dir.path(), 2, "sleeper "));
}

/// Waits (up to 10 s) until every rank's log holds `line`.
fn wait_for_line(dir: &Path, nproc: usize, line: &str) {
    let start = Instant::now();
    while !(0..nproc).all(|r| {
        std::fs::read_to_string(log_path(dir, r)).is_ok_and(|l| l.lines().any(|l| l == line))
    }) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no {line:?} in every log"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn replicas_that_stop_on_an_interrupt_end_the_launch_as_stopped() {
    let dir = tempfile::tempdir().unwrap();
    // Replicas that stop on SIGTERM with the trainer's code for a stop on request.
    let script = r#"trap 'exit 143' TERM; echo ready; sleep 30 & wait"#;
    let opts = sh(2, dir.path(), script);
    let flag = Arc::new(AtomicI32::new(0));
    let setter = {
        let (flag, dir) = (flag.clone(), dir.path().to_path_buf());
        thread::spawn(move || {
            wait_for_line(&dir, 2, "ready");
            flag.store(libc::SIGUSR2, Ordering::SeqCst);
        })
    };
    let ended = run(&opts, &flag).unwrap();
    setter.join().unwrap();
    assert_eq!(
        ended,
        Ended::Stopped(StopCause::Signal {
            signal: libc::SIGUSR2,
            ranks: vec![0, 1]
        })
    );
    // `launch` reports it as the interrupt it always was.
    match ended.into_result().err() {
        Some(Error::Launch(msg)) => assert_eq!(msg, "interrupted by SIGUSR2; stopped ranks 0, 1"),
        other => panic!("expected Error::Launch, got {other:?}"),
    }
}

#[test]
fn replicas_that_all_stop_on_their_own_request_end_the_launch_as_stopped() {
    let dir = tempfile::tempdir().unwrap();
    // Rank 0 finishes its step (a SIGTERM only repeats the request to it), then stops too.
    let script = once_ready(
        dir.path(),
        1,
        "exit 143",
        "trap '' TERM; READY; sleep 0.2; exit 143",
    );
    let ended = run(&sh(2, dir.path(), &script), &AtomicI32::new(0)).unwrap();
    assert!(
        matches!(&ended, Ended::Stopped(StopCause::Replica(first)) if first.rank == 1),
        "{ended:?}"
    );
    match ended.into_result().err() {
        Some(Error::Replica { rank, code, .. }) => assert_eq!((rank, code), (1, Some(143))),
        other => panic!("expected Error::Replica, got {other:?}"),
    }
    std::fs::remove_file(dir.path().join("ready")).unwrap();
    let err = launch(&sh(2, dir.path(), &script)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Replica {
                code: Some(143),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_replica_that_fails_while_the_others_stop_is_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let script = once_ready(
        dir.path(),
        0,
        "exit 143",
        "trap '' TERM; READY; sleep 0.3; exit 3",
    );
    let ended = run(&sh(2, dir.path(), &script), &AtomicI32::new(0)).unwrap();
    assert!(matches!(ended, Ended::Failed(_)), "{ended:?}");
    let err = ended.into_result().unwrap_err();
    match err {
        Error::Replica { rank, code, .. } => assert_eq!((rank, code), (1, Some(3))),
        other => panic!("expected Error::Replica, got {other:?}"),
    }
}

#[test]
fn missing_program_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = launch(&LaunchOptions::new(
        2,
        "/nonexistent/ddp-trainer",
        dir.path(),
    ))
    .unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path == Path::new("/nonexistent/ddp-trainer")),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn invalid_options() {
    let dir = tempfile::tempdir().unwrap();
    let err = launch(&LaunchOptions::new(0, "/bin/true", dir.path())).unwrap_err();
    assert_eq!(err.to_string(), "launcher: --nproc must be at least 1");
    let mut opts = LaunchOptions::new(1, "/bin/true", dir.path());
    opts.master_port = Some(0);
    assert!(matches!(launch(&opts), Err(Error::Launch(_))));
}
