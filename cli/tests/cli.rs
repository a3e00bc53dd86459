//! The `ddp` binary end to end: real supervisor processes, real replicas, real files.

mod common;
use common::*;

use std::path::{Path, PathBuf};

use std::time::Duration;

use ddp_workspaces::{Run, RunStatus, SupervisorEvent, Workspace};

/// A small MNIST spec: 2 replicas, `epochs` epochs of 1,024 samples, checkpoint every epoch,
/// two restarts.
fn spec(dir: &Path, epochs: usize) -> PathBuf {
    TestSpec::small_mnist_cnn()
        .name("mnist-small")
        .set("train.epochs", epochs)
        .set("ddp.replicas", 2)
        .set("checkpoint.every_epochs", 1)
        .set("checkpoint.keep_last", 5)
        .set("restart.max_restarts", 2)
        .set("restart.backoff_s", 0.2)
        .write(dir)
}

fn only_run(ws: &Path) -> Run {
    let (runs, bad) = Workspace::open(ws).unwrap().runs().unwrap();
    assert!(bad.is_empty());
    assert_eq!(runs.len(), 1);
    runs.into_iter().next().unwrap()
}

fn events(run: &Run) -> Vec<SupervisorEvent> {
    run.events().unwrap().into_iter().map(|e| e.event).collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

#[test]
fn run_in_the_foreground_to_completion() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let mut c = ddp(&ws);
    c.arg("run")
        .arg(spec(dir.path(), 2))
        .arg("--name")
        .arg("first");
    let out = ok(output(c, Duration::from_secs(120)));
    assert!(out.contains("status") && out.contains("completed"), "{out}");
    assert!(out.contains("test accuracy"), "{out}");
    let run = only_run(&ws);
    let r = &run.record;
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.name.as_deref(), Some("first"));
    assert_eq!(r.replicas, 2);
    assert!(r.started.is_some() && r.ended.is_some());
    assert!(run.dir.starts_with(ws.join("experiments/mnist-small/runs")));
    for f in [
        "run.json",
        "spec.toml",
        "events.jsonl",
        "logs/rank-0.log",
        "logs/rank-1.log",
        "logs/supervisor.log",
        "metrics/rank-0.jsonl",
        "metrics/rank-1.jsonl",
        "model.safetensors",
        "checkpoints/epoch-0002.safetensors",
    ] {
        assert!(run.dir.join(f).exists(), "missing {f}");
    }
    let ev = events(&run);
    assert!(
        matches!(
            ev[0],
            SupervisorEvent::Started {
                attempt: 0,
                resume: false,
                ..
            }
        ),
        "{ev:?}"
    );
    assert_eq!(ev.last(), Some(&SupervisorEvent::Completed));
    // ls and show see it.
    let ls = ok(ddp(&ws).arg("ls").output().unwrap());
    assert!(
        ls.contains(&r.id) && ls.contains("completed") && ls.contains("first"),
        "{ls}"
    );
    let show = ok(ddp(&ws)
        .args(["show", "latest", "--json"])
        .output()
        .unwrap());
    let v: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert_eq!(v["status"], "completed");
    assert!(v["summary"]["test_accuracy"].as_f64().unwrap() > 0.5);
    // Where its steps went: the last train record's breakdown, in the JSON and the text.
    let b = &v["summary"]["step_breakdown"];
    assert!(b["step_s"].as_f64().unwrap() > 0.0, "{show}");
    assert!(b["compute_s"].as_f64().unwrap() > 0.0, "{show}");
    let show = ok(ddp(&ws).args(["show", "latest"]).output().unwrap());
    let line = show
        .lines()
        .find(|l| l.starts_with("step time"))
        .unwrap_or_else(|| panic!("no step time in\n{show}"));
    assert!(
        line.contains(" s/step: compute ") && line.ends_with("-bound"),
        "{line}"
    );
    // ls answers from the run index, which follows the folders: a tag added, the index
    // deleted (built again), the run removed.
    assert!(ws.join("index.sqlite").exists());
    let keep = ["ls", "--where", "tags = \"keep\" and spec.train.epochs = 2"];
    assert!(!ok(ddp(&ws).args(keep).output().unwrap()).contains(&r.id));
    ok(ddp(&ws).args(["tag", &r.id, "keep"]).output().unwrap());
    assert!(ok(ddp(&ws).args(keep).output().unwrap()).contains(&r.id));
    std::fs::remove_file(ws.join("index.sqlite")).unwrap();
    assert!(ok(ddp(&ws).args(keep).output().unwrap()).contains(&r.id));
    ok(ddp(&ws).args(["rm", &r.id]).output().unwrap());
    assert!(!ok(ddp(&ws).arg("ls").output().unwrap()).contains(&r.id));
}

#[test]
fn detach_logs_stop_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let mut c = ddp(&ws);
    c.arg("run").arg(spec(dir.path(), 6)).arg("--detach");
    let out = ok(output(c, Duration::from_secs(30)));
    assert!(out.contains("detached"), "{out}");
    let run = only_run(&ws);
    // Wait until the first checkpoint, then stop.
    wait_for("a checkpoint", Duration::from_secs(90), || {
        run.dir.join("checkpoints/epoch-0001.safetensors").exists()
    });
    let logs = ok(ddp(&ws)
        .args(["logs", "latest", "--tail", "3"])
        .output()
        .unwrap());
    // Rank 0 prints the progress lines; every line carries its rank.
    assert!(
        logs.contains("[rank 0] ") && logs.lines().all(|l| l.starts_with("[rank ")),
        "{logs}"
    );
    let stop = ok(output(
        {
            let mut c = ddp(&ws);
            c.args(["stop", "latest"]);
            c
        },
        Duration::from_secs(60),
    ));
    assert!(stop.contains("stopped"), "{stop}");
    let run = Run::load(&run.dir).unwrap();
    assert_eq!(run.record.status, RunStatus::Stopped);
    assert!(!run.dir.join("model.safetensors").exists());
    assert!(events(&run).contains(&SupervisorEvent::Stopped));
    // Resume in the foreground to completion.
    let out = ok(output(
        {
            let mut c = ddp(&ws);
            c.args(["resume", &run.record.id]);
            c
        },
        Duration::from_secs(120),
    ));
    assert!(out.contains("completed"), "{out}");
    let run = Run::load(&run.dir).unwrap();
    assert_eq!(run.record.status, RunStatus::Completed);
    assert!(
        events(&run)
            .iter()
            .any(|e| matches!(e, SupervisorEvent::Started { resume: true, .. }))
    );
    // A completed run can be removed; logs -f on it returns at once.
    ok(output(
        {
            let mut c = ddp(&ws);
            c.args(["logs", "-f", "latest"]);
            c
        },
        Duration::from_secs(10),
    ));
    ok(ddp(&ws).args(["rm", "latest"]).output().unwrap());
    assert!(!run.dir.exists());
}

/// kill -9 of a replica mid-epoch: the group restarts from the last checkpoint and ends with the
/// same weights as an uninterrupted run.
#[test]
fn killed_replica_restarts_from_checkpoint_with_identical_weights() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 3);
    let clean_ws = dir.path().join("clean");
    ok(output(
        {
            let mut c = ddp(&clean_ws);
            c.arg("run").arg(&spec);
            c
        },
        Duration::from_secs(120),
    ));
    let ws = dir.path().join("ws");
    ok(output(
        {
            let mut c = ddp(&ws);
            c.arg("run").arg(&spec).arg("--detach");
            c
        },
        Duration::from_secs(30),
    ));
    let run = only_run(&ws);
    wait_for("the first checkpoint", Duration::from_secs(90), || {
        run.dir.join("checkpoints/epoch-0001.safetensors").exists()
    });
    let pid = {
        let r = Run::load(&run.dir).unwrap();
        *r.record
            .replica_pids
            .get(&1)
            .expect("rank 1's pid in run.json")
    };
    // SAFETY: kill(2) on the replica pid the supervisor recorded.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_for("the run to end", Duration::from_secs(120), || {
        Run::load_checked(&run.dir)
            .unwrap()
            .record
            .status
            .is_terminal()
    });
    let run = Run::load(&run.dir).unwrap();
    assert_eq!(
        run.record.status,
        RunStatus::Completed,
        "{:?}",
        run.record.error
    );
    assert_eq!(run.record.restarts, 1);
    let ev = events(&run);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            SupervisorEvent::ReplicaExited {
                rank: 1,
                signal: Some(9),
                ..
            }
        )),
        "{ev:?}"
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, SupervisorEvent::Restarting { attempt: 1, .. })),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| matches!(
            e,
            SupervisorEvent::Started {
                attempt: 1,
                resume: true,
                ..
            }
        )),
        "{ev:?}"
    );
    let a = candle_core::safetensors::load(
        run.dir.join("model.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let clean = only_run(&clean_ws);
    let b = candle_core::safetensors::load(
        clean.dir.join("model.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let (d, k) = ddp_workspaces::test_util::worst_tensor(&a, &b);
    assert!(d <= 1e-6, "{k} differs by {d} after the restart");
}

#[test]
fn exceeding_max_restarts_fails_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path(), 6).to_path_buf();
    let mut c = ddp(&ws);
    c.arg("run")
        .arg(&spec)
        .args(["--set", "restart.max_restarts=0", "--detach"]);
    ok(output(c, Duration::from_secs(30)));
    let run = only_run(&ws);
    wait_for("replica pids", Duration::from_secs(60), || {
        Run::load(&run.dir).unwrap().record.replica_pids.len() == 2
    });
    std::thread::sleep(Duration::from_millis(300));
    let pid = Run::load(&run.dir).unwrap().record.replica_pids[&0];
    // SAFETY: kill(2) on a recorded replica pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_for("failure", Duration::from_secs(60), || {
        Run::load_checked(&run.dir)
            .unwrap()
            .record
            .status
            .is_terminal()
    });
    let run = Run::load(&run.dir).unwrap();
    assert_eq!(run.record.status, RunStatus::Failed);
    let err = run.record.error.clone().unwrap();
    assert!(
        err.contains("rank 0 was killed by signal 9")
            && err.contains("restart.max_restarts = 0 used up"),
        "{err}"
    );
}

#[test]
fn killing_the_supervisor_leaves_no_replica_and_marks_the_run_failed() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let mut c = ddp(&ws);
    c.arg("run").arg(spec(dir.path(), 6)).arg("--detach");
    ok(output(c, Duration::from_secs(30)));
    let run = only_run(&ws);
    wait_for("replica pids", Duration::from_secs(60), || {
        Run::load(&run.dir).unwrap().record.replica_pids.len() == 2
    });
    let r = Run::load(&run.dir).unwrap().record;
    let sup = r.supervisor.unwrap().pid;
    // SAFETY: kill(2) on the recorded supervisor pid.
    unsafe { libc::kill(sup as i32, libc::SIGKILL) };
    for pid in r.replica_pids.values() {
        wait_for(
            "the replica to die with its supervisor",
            Duration::from_secs(10),
            || !alive(*pid),
        );
    }
    wait_for("the supervisor to be gone", Duration::from_secs(10), || {
        !alive(sup)
    });
    let ls = ok(ddp(&ws).arg("ls").output().unwrap());
    assert!(ls.contains("failed"), "{ls}");
    let run = Run::load(&run.dir).unwrap();
    assert!(
        run.record
            .error
            .unwrap()
            .contains(&format!("supervisor (pid {sup}) is gone"))
    );
}

#[test]
fn bad_inputs_are_clear_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    // Unknown run id, before and after a run exists.
    let o = ddp(&ws).args(["show", "nope"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("does not exist yet"),
        "{}",
        text(&o)
    );
    let spec = spec(dir.path(), 1);
    ok(output(
        {
            let mut c = ddp(&ws);
            c.arg("run").arg(&spec).args(["--set", "train.max_steps=2"]);
            c
        },
        Duration::from_secs(60),
    ));
    let id = only_run(&ws).record.id;
    let typo = format!("{}x", &id[..id.len() - 1]);
    let o = ddp(&ws).args(["show", &typo]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("did you mean `{id}`")),
        "{}",
        text(&o)
    );
    // Spec errors: unknown key (file and line), wrong type, --set on a missing key.
    std::fs::write(
        dir.path().join("bad.toml"),
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("\nepochs = 1", "\nepoch = 1"),
    )
    .unwrap();
    let o = ddp(&ws)
        .arg("run")
        .arg(dir.path().join("bad.toml"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("bad.toml:11: unknown key `train.epoch`; did you mean `train.epochs`?"),
        "{}",
        text(&o)
    );
    let o = ddp(&ws)
        .arg("run")
        .arg(&spec)
        .args(["--set", "train.lr=fast"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--set train.lr=fast"),
        "{}",
        text(&o)
    );
    let o = ddp(&ws)
        .arg("run")
        .arg(&spec)
        .args(["--set", "train.lrr=0.1"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("did you mean `train.lr`"),
        "{}",
        text(&o)
    );
    // More GPUs asked than exist.
    let o = ddp(&ws)
        .env("DDP_SIMULATED_GPUS", "2")
        .arg("run")
        .arg(&spec)
        .args(["--set", "ddp.devices=[0, 3]"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("ddp.devices asks for GPU 3 but this machine has GPUs 0-1"),
        "{}",
        text(&o)
    );
    // Disk full while rewriting run.json: the command fails clearly and the old record stays.
    let dir0 = only_run(&ws).dir;
    let before = std::fs::read_to_string(dir0.join("run.json"))
        .unwrap()
        .replace("\"completed\"", "\"failed\"");
    std::fs::write(dir0.join("run.json"), &before).unwrap();
    let mut c = ddp(&ws);
    c.args(["resume", "latest", "--detach"]);
    // SAFETY: setrlimit and signal are async-signal-safe; the child gets a 64-byte file size limit.
    unsafe {
        use std::os::unix::process::CommandExt;
        c.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = c.output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("run.json"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(dir0.join("run.json")).unwrap(),
        before
    );
    assert!(
        std::fs::read_dir(&dir0).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp"))
    );
    // None of those created a run.
    assert_eq!(Workspace::open(&ws).unwrap().runs().unwrap().0.len(), 1);
    // A folder that is not a workspace.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine").unwrap();
    let o = ddp(&foreign).arg("run").arg(&spec).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not a ddp workspace"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 1);
    // A corrupt run.json is reported and skipped by ls, never fatal.
    let run_dir = only_run(&ws).dir;
    let broken = run_dir.parent().unwrap().join("20200101-000000-000000");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("run.json"), "{ half").unwrap();
    let o = ddp(&ws).arg("ls").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&id));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a valid run record"),
        "{}",
        text(&o)
    );
}

/// Two runs that want the same (simulated) GPUs run one after the other: the second waits queued.
#[test]
fn runs_wanting_the_same_devices_queue() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path(), 2);
    let start = |name: &str| {
        let mut c = ddp(&ws);
        c.env("DDP_SIMULATED_GPUS", "2")
            .arg("run")
            .arg(&spec)
            .args(["--detach", "--name", name]);
        ok(output(c, Duration::from_secs(30)));
    };
    start("a");
    let first = only_run(&ws);
    wait_for(
        "the first run to hold the GPUs",
        Duration::from_secs(30),
        || Run::load(&first.dir).unwrap().record.status == RunStatus::Running,
    );
    start("b");
    let (runs, _) = Workspace::open(&ws).unwrap().runs().unwrap();
    let second = runs
        .into_iter()
        .find(|r| r.record.name.as_deref() == Some("b"))
        .unwrap();
    wait_for("both runs to end", Duration::from_secs(180), || {
        [&first, &second].iter().all(|r| {
            Run::load_checked(&r.dir)
                .unwrap()
                .record
                .status
                .is_terminal()
        })
    });
    let (a, b) = (
        Run::load(&first.dir).unwrap(),
        Run::load(&second.dir).unwrap(),
    );
    assert_eq!(a.record.status, RunStatus::Completed);
    assert_eq!(b.record.status, RunStatus::Completed);
    assert!(a.record.devices.contains("GPU"), "{}", a.record.devices);
    let queued = events(&b).iter().any(|e| matches!(e, SupervisorEvent::Queued { waiting_for } if waiting_for.contains("held by run")));
    assert!(queued, "{:?}", events(&b));
    assert!(
        b.record.started.unwrap() >= a.record.ended.unwrap(),
        "the second run started before the first ended"
    );
}

/// SIGSTOP of one replica of three mid-run: the others' collectives time out (`ddp.timeout_s`)
/// and their error, which the run keeps and `ddp show` prints, names rank 1 as the rank that
/// is behind, where the others wait, and what it last did (the ledger of collectives).
#[test]
fn a_stopped_replica_is_named_by_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = TestSpec::small_mnist_cnn()
        .name("stopped")
        .set("train.epochs", 30)
        .set("ddp.replicas", 3)
        .set("ddp.shared_memory", false)
        .set("ddp.timeout_s", 3)
        .set("restart.max_restarts", 0)
        .write(dir.path());
    let mut c = ddp(&ws);
    c.arg("run").arg(&spec).arg("--detach");
    ok(output(c, Duration::from_secs(30)));
    let run = only_run(&ws);
    wait_for(
        "rank 0's first train record",
        Duration::from_secs(90),
        || {
            std::fs::read_to_string(run.dir.join("metrics/rank-0.jsonl"))
                .is_ok_and(|m| m.contains("\"train\""))
        },
    );
    let pid = Run::load(&run.dir).unwrap().record.replica_pids[&1];
    // SAFETY: kill(2) on the replica pid the supervisor recorded.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    wait_for("the run to fail", Duration::from_secs(60), || {
        Run::load_checked(&run.dir)
            .unwrap()
            .record
            .status
            .is_terminal()
    });
    // The supervisor ends the stopped replica too (SIGKILL reaches a stopped process).
    wait_for("rank 1 to be gone", Duration::from_secs(30), || !alive(pid));
    let record = Run::load(&run.dir).unwrap().record;
    assert_eq!(record.status, RunStatus::Failed);
    let error = record.error.clone().unwrap_or_default();
    eprintln!("the run's error: {error}");
    let named =
        error.contains("rank 1 has not entered") || error.contains("rank 1 is not answering");
    assert!(
        named && error.contains("ranks 0 and 2 wait there"),
        "{error}"
    );
    assert!(error.contains("#"), "the collective's number: {error}");
    let shown = ok(ddp(&ws).args(["show", "latest"]).output().unwrap());
    assert!(shown.contains("ranks 0 and 2 wait there"), "{shown}");
}
